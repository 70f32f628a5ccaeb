// Variant tuning: winners are measured on the device, cached per device and problem key, and
// persisted through the table; matmul and matvec then use the tuned variant.
import { afterAll, beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, type Recorder } from "@webart/gpu";
import { MATMUL_VARIANTS, matmul, matmulVariant, tuneMatmul } from "../matmul/index.ts";
import { matvecVariant, matvecVariants, tuneMatvec } from "../matvec/index.ts";
import { deviceKey, clearTuneTable, loadTuneTable, tune, tuneTable, tuned } from "./index.ts";
import { tuneKernels } from "./kernels.ts";
import { ROW_THREADS, rowThreads } from "../util/row-threads.ts";
import { isCpuDevice } from "@webart/gpu";
import { attentionVariant, tileProfile } from "../attention/index.ts";
import { LORA_LAYOUTS, loraLayout } from "../lora/index.ts";
import { rmsnormVariant } from "../rmsnorm/index.ts";

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
  const entry = tuneTable()[`${deviceKey(gpu)}|test.matmul64`];
  expect(Object.keys(entry.ms).sort()).toEqual([...MATMUL_VARIANTS].sort());
  expect(entry.ms[winner]).toBe(Math.min(...Object.values(entry.ms)));
  // One warm-up and two timed runs; one timed run for a candidate already 3x behind the best before it.
  for (const v of MATMUL_VARIANTS) expect([2, 3]).toContain(runs[v]);
  // The winner was a contender, timed twice (which others were depends on load: a spike can put any 3x behind).
  expect(runs[winner]).toBe(3);
  const before = { ...runs };
  expect(await tune(gpu, "test.matmul64", MATMUL_VARIANTS, runOne)).toBe(winner);
  expect(runs).toEqual(before); // cached: nothing ran again
  expect(tuned(gpu, "test.matmul64")).toBe(winner);
  gpu.release(a, b, c);
});

it("times calls shorter than minSubmitMs several to a submit", async () => {
  const [a, c] = [gpu.buffer(16 * 16 * 4), gpu.buffer(16 * 16 * 4)];
  const runs: Record<string, number> = {};
  const runOne = (v: (typeof MATMUL_VARIANTS)[number], rec: Recorder) => {
    runs[v] = (runs[v] ?? 0) + 1;
    matmul(gpu, rec, a, a, c, { M: 16, N: 16, K: 16, variant: v });
  };
  // A 16³ matmul takes far less than 10 s / 64, so every submit carries the maximum of 64 calls.
  await tune(gpu, "test.copies", MATMUL_VARIANTS, runOne, { minReps: 1, minMs: 0, maxReps: 1, minSubmitMs: 10_000 });
  const [first, second] = MATMUL_VARIANTS;
  expect(runs[first]).toBe(2 + 2 * 64); // two single calls to size the submits, then warm-up and one timed
  expect(runs[second]).toBe(2 * 64);
  gpu.release(a, c);
});

it("keys results by device and settings: a robust device on the same GPU is tuned separately", async () => {
  const robust = await getDevice({ robustness: true });
  expect(deviceKey(robust)).not.toBe(deviceKey(gpu));
  expect(deviceKey(gpu)).toContain(gpu.kind.architecture);
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
  loadTuneTable({ [`${deviceKey(gpu)}|matmul.nt.bf16`]: { winner: other, ms: {} } });
  expect(matmulVariant(gpu, "nt", "bf16")).toBe(other);
  expect(() => loadTuneTable({ x: { ms: {} } as never })).toThrow(/no winner/);
});

it("every layout choice follows a loaded table entry for its key, and ignores winners that are not candidates", () => {
  const k = deviceKey(gpu);
  const set = (key: string, winner: string, ms: Record<string, number> = {}) =>
    loadTuneTable({ [`${k}|${key}`]: { winner, ms } });
  for (const threads of ROW_THREADS) {
    set("sample.threads", threads);
    set("logprobs.threads", threads);
    expect(rowThreads(gpu, "sample")).toBe(Number(threads));
    expect(rowThreads(gpu, "logprobs")).toBe(Number(threads));
  }
  set("sample.threads", "512"); // not a candidate: the device kind's default
  expect(rowThreads(gpu, "sample")).toBe(isCpuDevice(gpu) ? 8 : 256);

  for (const use of ["train", "decode"] as const) {
    set(`attention.${use}`, "tiled-cpu");
    expect(attentionVariant(gpu, 64, use)).toBe("tiled");
    for (const p of ["cpu", "gpu"] as const) {
      set(`attention.${use}.tiles`, `tiled-${p}`);
      expect(tileProfile(gpu, use)).toBe(p);
    }
    set(`attention.${use}`, "rows");
    expect(attentionVariant(gpu, 64, use)).toBe("rows");
    expect(attentionVariant(gpu, 30, use)).toBe("tiled"); // rows need D % 4 == 0
  }

  for (const layout of LORA_LAYOUTS) {
    set("lora.layout", layout);
    expect(loraLayout(gpu)).toBe(layout);
    set("rmsnorm.layout", layout);
    expect(rmsnormVariant(gpu, 896).wg).toBe(layout === "cpu" ? 64 : 256);
  }
  clearTuneTable();
});

it("tuneKernels times each choice on the model's shapes; the winners are the fastest measured", async () => {
  const shape = { weights: "bf16" as const, vocab: 300, hidden: 64, heads: 4, kvHeads: 2, headDim: 16 };
  const winners = await tuneKernels(gpu, shape);
  const table = tuneTable();
  const keys = ["matmul.nt.bf16", "matmul.nn.bf16", "matmul.nn.f32", "matvec.bf16", "sample.threads"];
  keys.push("logprobs.threads", "attention.train", "attention.decode", "lora.layout", "rmsnorm.layout");
  // The tile profiles are ranked only where the tiled family won.
  for (const use of ["train", "decode"])
    if (winners[`attention.${use}`] !== "rows") keys.push(`attention.${use}.tiles`);
  expect(Object.keys(winners).sort()).toEqual([...keys].sort());
  for (const key of keys) {
    const e = table[`${deviceKey(gpu)}|${key}`];
    expect(winners[key], key).toBe(e.winner);
    expect(Object.keys(e.ms).length, key).toBeGreaterThan(1);
    expect(e.ms[e.winner]).toBe(Math.min(...Object.values(e.ms)));
  }
});

it("an ordered search stops at the first candidate 3x slower than the best so far", async () => {
  const [a, c] = [gpu.buffer(512 * 512 * 4), gpu.buffer(512 * 512 * 4)];
  const sizes = ["16", "512", "32"] as const; // "512" is 32768x the work of "16"; "32" is never reached
  const runs: Record<string, number> = {};
  const winner = await tune(
    gpu,
    "test.ordered",
    sizes,
    (v, rec) => {
      runs[v] = (runs[v] ?? 0) + 1;
      const n = Number(v);
      matmul(gpu, rec, a, a, c, { M: n, N: n, K: n, variant: MATMUL_VARIANTS[0] });
    },
    { minReps: 2, minMs: 0, ordered: true },
  );
  const ms = tuneTable()[`${deviceKey(gpu)}|test.ordered`].ms;
  expect(runs["32"]).toBeUndefined();
  expect(Object.keys(ms)).toEqual(["16", "512"]);
  expect(winner).toBe("16");
  gpu.release(a, c);
});
