// Variant tuning: winners are measured on the device, cached per adapter and problem key, and
// persisted through the table; matmul and matvec then use the tuned variant.
import { afterAll, beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, type Recorder } from "@webart/engine/gpu";
import { MATMUL_VARIANTS, matmul, matmulVariant, tuneMatmul } from "../matmul/index.ts";
import { matvecVariant, matvecVariants, tuneMatvec } from "../matvec/index.ts";
import { adapterKey, clearTuneTable, loadTuneTable, tune, tuneTable, tuned } from "./index.ts";

let gpu: Gpu;
beforeAll(async () => {
  gpu = await getDevice();
  clearTuneTable();
});
afterAll(() => {
  clearTuneTable();
  expect(gpu.errors).toEqual([]);
});

it("times every candidate once, returns the fastest, and serves it from the cache afterwards", async () => {
  const [a, b, c] = [gpu.buffer(64 * 64 * 4), gpu.buffer(64 * 64 * 4), gpu.buffer(64 * 64 * 4)];
  const runs: Record<string, number> = {};
  const runOne = (v: (typeof MATMUL_VARIANTS)[number], rec: Recorder) => {
    runs[v] = (runs[v] ?? 0) + 1;
    matmul(gpu, rec, a, b, c, { M: 64, N: 64, K: 64, variant: v });
  };
  const winner = await tune(gpu, "test.matmul64", MATMUL_VARIANTS, runOne, { minReps: 2, minMs: 0 });
  const entry = tuneTable()[`${adapterKey(gpu)}|test.matmul64`];
  expect(Object.keys(entry.ms).sort()).toEqual([...MATMUL_VARIANTS].sort());
  expect(entry.ms[winner]).toBe(Math.min(...Object.values(entry.ms)));
  for (const v of MATMUL_VARIANTS) expect(runs[v]).toBe(3); // one warm-up + two timed
  expect(await tune(gpu, "test.matmul64", MATMUL_VARIANTS, runOne)).toBe(winner);
  for (const v of MATMUL_VARIANTS) expect(runs[v]).toBe(3); // cached: nothing ran again
  expect(tuned(gpu, "test.matmul64")).toBe(winner);
  gpu.release(a, b, c);
});

it("keys results by adapter settings: a robust device of the same adapter is tuned separately", async () => {
  const robust = await getDevice({ robustness: true });
  expect(adapterKey(robust)).not.toBe(adapterKey(gpu));
  expect(adapterKey(gpu)).toContain(gpu.adapter.architecture);
  expect(tuned(robust, "test.matmul64")).toBeUndefined();
});

it("tuneMatmul and tuneMatvec pick what matmul and matvec then use; the table round-trips", async () => {
  const mm = await tuneMatmul(gpu, [{ mode: "nt", bDtype: "bf16" }], 64);
  expect(MATMUL_VARIANTS).toContain(mm["matmul.nt.bf16"]);
  expect(matmulVariant(gpu, "nt", "bf16")).toBe(mm["matmul.nt.bf16"]);
  const mv = await tuneMatvec(gpu, ["f32"], [128, 256]);
  expect(matvecVariants(gpu)).toContain(mv["matvec.f32"]);
  expect(matvecVariant(gpu, "f32")).toBe(mv["matvec.f32"]);

  // Persist, clear, reload; then force the other matmul variant through a loaded entry.
  const saved = JSON.parse(JSON.stringify(tuneTable()));
  clearTuneTable();
  expect(tuned(gpu, "matmul.nt.bf16")).toBeUndefined();
  loadTuneTable(saved);
  expect(matmulVariant(gpu, "nt", "bf16")).toBe(mm["matmul.nt.bf16"]);
  const other = MATMUL_VARIANTS.find((v) => v !== mm["matmul.nt.bf16"])!;
  loadTuneTable({ [`${adapterKey(gpu)}|matmul.nt.bf16`]: { winner: other, ms: {} } });
  expect(matmulVariant(gpu, "nt", "bf16")).toBe(other);
  expect(() => loadTuneTable({ x: { ms: {} } as never })).toThrow(/no winner/);
});
