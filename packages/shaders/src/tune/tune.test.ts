// Variant tuning: winners are measured on the device and kept with it per problem key (op and shape), persisted
// through the table; each kernel follows the tuning it is given.
import { afterAll, beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, type Recorder } from "@webart/gpu";
import { MATMUL_VARIANTS, defaultMatmulVariant, matmul, matmulVariant, tuneMatmul } from "../matmul/index.ts";
import { matvec, matvecShapeKey, matvecVariant, matvecVariants, tuneMatvec } from "../matvec/index.ts";
import { deviceKey, loadTuneTable, tune, tuneTable, tuned } from "./index.ts";
import { DECODE_ROWS_MAX, lanesAgree, tuneDecodeRows, tuneKernels, tuneQ4Rows, tuneRowThreads } from "./kernels.ts";
import { ROW_THREADS, rowThreads } from "../util/row-threads.ts";
import { isCpuDevice } from "@webart/gpu";
import { attentionVariant, tileProfile } from "../attention/index.ts";
import { LORA_LAYOUTS, loraLayout } from "../lora/index.ts";
import { rmsnormVariant } from "../rmsnorm/index.ts";
import { ROPE_QKV_LAYOUTS, ropeQkvLayout } from "../rope/index.ts";

let gpu: Gpu;
beforeAll(async () => {
  gpu = await getDevice();
  gpu.tuning.clear();
});
afterAll(() => {
  gpu.tuning.clear();
  expect(gpu.errors).toEqual([]);
});

it("times every candidate once, returns the fastest, and serves it from the cache afterwards", async () => {
  const [a, b, c] = [gpu.buffer(64 * 64 * 4), gpu.buffer(64 * 64 * 4), gpu.buffer(64 * 64 * 4)];
  const runs: Record<string, number> = {};
  const runOne = (v: (typeof MATMUL_VARIANTS)[number], rec: Recorder) => {
    runs[v] = (runs[v] ?? 0) + 1;
    matmul(gpu, rec, { a, b, c }, { M: 64, N: 64, K: 64 }, { variant: v });
  };
  const winner = await tune(gpu, "test.matmul64", MATMUL_VARIANTS, runOne, { minReps: 2, minMs: 0 });
  const entry = tuneTable(gpu)[`${deviceKey(gpu)}|test.matmul64`];
  expect(Object.keys(entry.ms).sort()).toEqual([...MATMUL_VARIANTS].sort());
  expect(entry.ms[winner]).toBe(Math.min(...Object.values(entry.ms)));
  // One warm-up and two timed runs; one timed run for a candidate already 3x behind the best before it.
  for (const v of MATMUL_VARIANTS) expect([2, 3]).toContain(runs[v]);
  // The contenders had a second round (which ones depends on load: a spike can put any 3x behind, and then even
  // leave a candidate's single timing below the contenders' medians, so the winner is not always among them).
  expect(Object.values(runs)).toContain(3);
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
    matmul(gpu, rec, { a, b: a, c }, { M: 16, N: 16, K: 16 }, { variant: v });
  };
  // A 16³ matmul takes far less than 10 s / 64, so every submit carries the maximum of 64 calls.
  await tune(gpu, "test.copies", MATMUL_VARIANTS, runOne, { minReps: 1, minMs: 0, maxReps: 1, minSubmitMs: 10_000 });
  const [first, second] = MATMUL_VARIANTS;
  expect(runs[first]).toBe(2 + 2 * 64); // two single calls to size the submits, then warm-up and one timed
  expect(runs[second]).toBe(2 * 64);
  gpu.release(a, c);
});

it("keeps results with the device: another device (a robust one on the same GPU) neither sees nor loads them", async () => {
  const robust = await getDevice({ robustness: true });
  expect(deviceKey(robust)).not.toBe(deviceKey(gpu));
  expect(deviceKey(gpu)).toContain(gpu.kind.architecture);
  expect(tuned(robust, "test.matmul64")).toBeUndefined();
  const saved = tuneTable(gpu);
  expect(Object.keys(saved).every((k) => k.startsWith(`${deviceKey(gpu)}|`))).toBe(true);
  expect(loadTuneTable(robust, saved)).toBe(0);
  expect(robust.tuning.size).toBe(0);
});

it("tuneMatvec can tune each decode problem on its own; matvec runs a problem's winner, others the dtype's", async () => {
  const shapes = [
    { N: 40, K: 64 },
    { N: 24, K: 32, gated: true },
  ];
  // A dtype winner that no problem picks, so the per-problem choice shows.
  loadTuneTable(gpu, { [`${deviceKey(gpu)}|matvec.bf16@128x256`]: { winner: "workgroup", ms: {} } });
  const mv = await tuneMatvec(gpu, ["bf16"], [128, 256], {}, shapes);
  expect(mv.bf16).toBe("workgroup");
  expect(mv.shapes?.size).toBe(2);
  for (const { N, K, gated = false } of shapes) {
    const key = `matvec.bf16@${N}x${K}${gated ? ".gated" : ""}`;
    const winner = tuned(gpu, key)!;
    expect(matvecVariants(gpu)).toContain(winner);
    // Each variant timed but columns, the variant for many rows (tuneDecodeRows weighs it).
    expect(Object.keys(gpu.tuning.get(key)!.ms).sort()).toEqual(
      matvecVariants(gpu)
        .filter((v) => v !== "columns")
        .sort(),
    );
    expect(matvecVariant(gpu, "bf16", mv, matvecShapeKey("bf16", N, K, gated))).toBe(winner);
  }
  expect(matvecVariant(gpu, "bf16", mv, matvecShapeKey("bf16", 40, 64, true))).toBe("workgroup"); // not tuned
  // matvec itself looks the problem up (a forced winner shows it).
  mv.shapes!.set(matvecShapeKey("bf16", 40, 64, false), "stream");
  const [x, w, y] = [gpu.buffer(64 * 4), gpu.buffer(40 * 64 * 2), gpu.buffer(40 * 4)];
  const rec = gpu.recorder();
  expect(matvec(gpu, rec, { x, w, y }, { M: 1, N: 40, K: 64 }, { wDtype: "bf16", tuning: mv })).toBe("stream");
  expect(matvec(gpu, rec, { x, w, y }, { M: 1, N: 20, K: 64 }, { wDtype: "bf16", tuning: mv })).toBe("workgroup");
  rec.abandon();
  gpu.release(x, w, y);
});

it("tuneMatmul and tuneMatvec return the tuning that matmul and matvec then use; the table round-trips", async () => {
  const mm = await tuneMatmul(gpu, [{ mode: "nt", bDtype: "bf16" }], 64);
  expect(MATMUL_VARIANTS).toContain(mm["nt.bf16"]);
  expect(matmulVariant(gpu, "nt", "bf16", mm)).toBe(mm["nt.bf16"]);
  expect(matmulVariant(gpu, "nt", "bf16")).toBe(defaultMatmulVariant(gpu)); // untuned: the device's default
  expect(tuned(gpu, "matmul.nt.bf16@64")).toBe(mm["nt.bf16"]);
  const mv = await tuneMatvec(gpu, ["f32"], [128, 256]);
  expect(matvecVariants(gpu)).toContain(mv.f32);
  expect(matvecVariant(gpu, "f32", mv)).toBe(mv.f32);

  // Persist, clear, reload: the loaded entry is served without timing; one naming another winner is followed.
  const saved = JSON.parse(JSON.stringify(tuneTable(gpu)));
  gpu.tuning.clear();
  expect(tuned(gpu, "matmul.nt.bf16@64")).toBeUndefined();
  expect(loadTuneTable(gpu, saved)).toBe(Object.keys(saved).length);
  expect(tuned(gpu, "matmul.nt.bf16@64")).toBe(mm["nt.bf16"]);
  const other = MATMUL_VARIANTS.find((v) => v !== mm["nt.bf16"])!;
  loadTuneTable(gpu, { [`${deviceKey(gpu)}|matmul.nt.bf16@64`]: { winner: other, ms: {} } });
  expect((await tuneMatmul(gpu, [{ mode: "nt", bDtype: "bf16" }], 64))["nt.bf16"]).toBe(other);
  expect(() => loadTuneTable(gpu, { x: { ms: {} } as never })).toThrow(/no winner/);
});

it("each kernel follows its tuning where given and the device kind's default where not", () => {
  const cpu = isCpuDevice(gpu);
  expect(rowThreads(gpu)).toBe(cpu ? 8 : 256);
  for (const threads of ROW_THREADS) expect(rowThreads(gpu, { threads: Number(threads) })).toBe(Number(threads));
  for (const use of ["train", "decode"] as const) {
    expect(attentionVariant(gpu, 64, use)).toBe(cpu ? "rows" : "tiled");
    expect(tileProfile(gpu, use)).toBe(cpu ? "cpu" : "gpu");
    for (const profile of ["cpu", "gpu"] as const) {
      const tiled = { [use]: { variant: "tiled", profile } } as const;
      expect(attentionVariant(gpu, 64, use, tiled)).toBe("tiled");
      expect(tileProfile(gpu, use, tiled)).toBe(profile);
    }
    const rows = { [use]: { variant: "rows", profile: "gpu" } } as const;
    expect(attentionVariant(gpu, 64, use, rows)).toBe("rows");
    expect(attentionVariant(gpu, 30, use, rows)).toBe("tiled"); // rows need D % 4 == 0
    // Lanes run where the device can run them at this D (it can here), else tiled.
    const lanes = { [use]: { variant: "lanes", profile: "gpu" } } as const;
    expect(attentionVariant(gpu, 64, use, lanes)).toBe("lanes");
    expect(attentionVariant(gpu, 30, use, lanes)).toBe("tiled");
  }
  expect(loraLayout(gpu)).toBe(cpu ? "cpu" : "gpu");
  expect(ropeQkvLayout(gpu)).toBe(cpu ? "cpu" : "gpu");
  for (const layout of ROPE_QKV_LAYOUTS) expect(ropeQkvLayout(gpu, { tuning: { layout } })).toBe(layout);
  expect(rmsnormVariant(gpu, 896).wg).toBe(cpu ? 64 : 256);
  for (const layout of LORA_LAYOUTS) {
    expect(loraLayout(gpu, { layout })).toBe(layout);
    expect(rmsnormVariant(gpu, 896, { tuning: { layout } }).wg).toBe(layout === "cpu" ? 64 : 256);
  }
});

it("lanesAgree: the lanes attention family gives the tiled family's o, lse and gradients, and decode, here", async () => {
  const notes = gpu.notes.length;
  expect(await lanesAgree(gpu, { heads: 14, kvHeads: 2, headDim: 64 })).toBe(true);
  expect(await lanesAgree(gpu, { heads: 4, kvHeads: 2, headDim: 128 })).toBe(true);
  expect(await lanesAgree(gpu, { heads: 4, kvHeads: 2, headDim: 6 })).toBe(false); // cannot run: no note
  expect(gpu.notes.length).toBe(notes);
});

it("a loaded winner that is not a candidate is measured again", async () => {
  const k = `sample.threads@V=300`;
  loadTuneTable(gpu, { [`${deviceKey(gpu)}|${k}`]: { winner: "512", ms: {} } });
  const { sample } = await tuneRowThreads(gpu, 300);
  expect(ROW_THREADS.map(Number)).toContain(sample.threads);
  expect(tuned(gpu, k)).toBe(String(sample.threads));
});

it("tuneKernels measures each choice on the model's shapes; another shape on the device gets its own", async () => {
  const shape = { weights: "bf16" as const, vocab: 300, hidden: 64, heads: 4, kvHeads: 2, headDim: 16 };
  gpu.tuning.clear(); // (earlier tests measured other sizes under the same op names)
  const t = await tuneKernels(gpu, shape);
  const keyOf = (prefix: string) => [...gpu.tuning.keys()].find((k) => k.startsWith(`${prefix}@`));
  const chosen: [string, string | undefined][] = [
    ["matmul.nt.bf16", t.matmul?.["nt.bf16"]],
    ["matmul.nn.bf16", t.matmul?.["nn.bf16"]],
    ["matmul.nn.f32", t.matmul?.["nn.f32"]],
    ["matvec.bf16", t.matvec?.bf16],
    ["sample.threads", String(t.sample?.threads)],
    ["logprobs.threads", String(t.logprobs?.threads)],
    ["lora.layout", t.lora?.layout],
    ["rmsnorm.layout", t.rmsnorm?.layout],
    ["rope.layout", t.rope?.layout],
    ["rope.prefill_layout", t.rope?.prefillLayout],
    ["rope.in_matvec", t.rope?.inMatvec ? "matvec" : "apart"],
  ];
  for (const use of ["train", "decode"] as const) {
    const a = t.attention?.[use];
    const family = gpu.tuning.get(`attention.${use}@H=4,KV=2,D=16`)!.winner;
    expect(a?.variant).toBe(family === "rows" ? "rows" : "tiled");
    // The tile profiles are ranked only where the tiled family won.
    if (family !== "rows") chosen.push([`attention.${use}.tiles`, `tiled-${a?.profile}`]);
  }
  for (const [prefix, value] of chosen) {
    const e = gpu.tuning.get(keyOf(prefix)!)!;
    expect(value, prefix).toBe(e.winner);
    expect(Object.keys(e.ms).length, prefix).toBeGreaterThan(1);
    expect(e.ms[e.winner]).toBe(Math.min(...Object.values(e.ms)));
  }
  // ropeQkv runs the decode layout up to the rows it was measured at (else 64 tokens), the prefill one above.
  expect(t.rope?.layoutRows).toBe(8);
  const both = { tuning: { layout: "gpu" as const, prefillLayout: "cpu" as const } };
  expect([1, 64, 65, 512].map((n) => ropeQkvLayout(gpu, both, n))).toEqual(["gpu", "gpu", "cpu", "cpu"]);
  const at8 = { tuning: { ...both.tuning, layoutRows: 8 } };
  expect([1, 8, 9].map((n) => ropeQkvLayout(gpu, at8, n))).toEqual(["gpu", "gpu", "cpu"]);
  expect(ropeQkvLayout(gpu, { tuning: { layout: "gpu" } }, 512)).toBe("gpu");
  // A model with per-head q/k norms keeps RoPE in ropeQkv: nothing to weigh.
  expect((await tuneKernels(gpu, { ...shape, qkNorm: true })).rope?.inMatvec).toBeUndefined();
  const other = await tuneKernels(gpu, { ...shape, hidden: 32 });
  expect(gpu.tuning.has("rmsnorm.layout@C=64") && gpu.tuning.has("rmsnorm.layout@C=32")).toBe(true);
  expect(other.rmsnorm?.layout).toBe(gpu.tuning.get("rmsnorm.layout@C=32")!.winner);
  expect(t.rmsnorm?.layout).toBe(gpu.tuning.get("rmsnorm.layout@C=64")!.winner);
});

it("tuneDecodeRows weighs a layer's MLP as matvecs against matmuls at 16, 32, 64 rows, up to the first the matmul wins", async () => {
  const shape = { weights: "bf16" as const, vocab: 300, hidden: 64, heads: 4, kvHeads: 2, headDim: 16 };
  expect(await tuneDecodeRows(gpu, shape, {}, false)).toEqual({ rows: DECODE_ROWS_MAX }); // no MLP width: no tuning
  const dims = { ...shape, intermediate: 136 };
  gpu.tuning.clear();
  const { rows, columnsAbove } = await tuneDecodeRows(gpu, dims, {}, false);
  expect(columnsAbove).toBeUndefined();
  const measured = [...gpu.tuning.entries()].filter(([k]) => k.startsWith("decode.rows@"));
  expect(measured[0][0]).toBe("decode.rows@M=16,C=64,F=136,bf16");
  const winners = measured.map(([, e]) => e.winner);
  for (const [k, e] of measured) expect(Object.keys(e.ms).sort(), k).toEqual(["matmul", "matvec"]);
  // Every M before the last measured went to the matvec; the bound is half the first M the matmul won, else 64.
  expect(winners.slice(0, -1).every((w) => w === "matvec")).toBe(true);
  const lost = winners.indexOf("matmul");
  expect(rows).toBe(lost < 0 ? DECODE_ROWS_MAX : [16, 32, 64][lost] / 2);
  expect(lost < 0 ? measured.length : lost + 1).toBe(measured.length);
  // Results loaded for this device decide without timing: the matmul winning at 32 rows gives 16.
  gpu.tuning.clear();
  const entry = (winner: string) => ({ winner, ms: { matvec: winner === "matvec" ? 1 : 2, matmul: 1.5 } });
  gpu.tuning.set("decode.rows@M=16,C=64,F=136,bf16", entry("matvec"));
  gpu.tuning.set("decode.rows@M=32,C=64,F=136,bf16", entry("matmul"));
  expect((await tuneDecodeRows(gpu, dims, {}, false)).rows).toBe(16);
  gpu.tuning.set("decode.rows@M=16,C=64,F=136,bf16", entry("matmul"));
  expect((await tuneDecodeRows(gpu, dims, {}, false)).rows).toBe(8);
  gpu.tuning.clear();
});

it("tuneDecodeRows with the columns variant: a candidate from 8 rows until it wins, then matvecs past the step before run it", async () => {
  const dims = {
    weights: "bf16" as const,
    vocab: 300,
    hidden: 64,
    heads: 4,
    kvHeads: 2,
    headDim: 16,
    intermediate: 136,
  };
  gpu.tuning.clear();
  const found = await tuneDecodeRows(gpu, dims, {}, false, true);
  const measured = [...gpu.tuning.entries()].filter(([k]) => k.startsWith("decode.rows@"));
  expect(measured[0][0]).toBe("decode.rows@M=8,C=64,F=136,bf16,columns");
  expect(Object.keys(measured[0][1].ms).sort()).toEqual(["columns", "matvec"]); // no matmul at 8 rows
  const won = measured.findIndex(([, e]) => e.winner === "columns");
  expect(found.columnsAbove).toBe(won < 0 ? undefined : [4, 8, 16, 32][won]);
  // After it won, the matvec candidate is the columns variant: it is not weighed again.
  for (const [k, e] of measured.slice(won + 1)) if (won >= 0) expect(Object.keys(e.ms), k).not.toContain("columns");
  // Loaded results: columns winning at 16 rows runs it past 8; the matmul winning at 64 ends at 32.
  gpu.tuning.clear();
  const entry = (winner: string, names: string[]) => ({ winner, ms: Object.fromEntries(names.map((n) => [n, 1])) });
  const key = (M: number) => `decode.rows@M=${M},C=64,F=136,bf16,columns`;
  gpu.tuning.set(key(8), entry("matvec", ["matvec", "columns"]));
  gpu.tuning.set(key(16), entry("columns", ["matvec", "columns", "matmul"]));
  gpu.tuning.set(key(32), entry("matvec", ["matvec", "matmul"]));
  gpu.tuning.set(key(64), entry("matmul", ["matvec", "matmul"]));
  expect(await tuneDecodeRows(gpu, dims, {}, false, true)).toEqual({ rows: 32, columnsAbove: 8 });
  // matvec() then picks the variant by rows.
  const mv = { bf16: "workgroup" as const, columnsAbove: 8 };
  expect([1, 8, 9, 64].map((M) => matvecVariant(gpu, "bf16", mv, undefined, M))).toEqual([
    "workgroup",
    "workgroup",
    "columns",
    "columns",
  ]);
  gpu.tuning.clear();
});

it("tuneQ4Rows weighs a layer's MLP on the nibbles against an f16 copy at 1 to 64 rows, up to the first the copy wins", async () => {
  const dims = { weights: "f16" as const, vocab: 300, hidden: 64, heads: 4, kvHeads: 2, headDim: 16, q4: true };
  expect(await tuneQ4Rows(gpu, dims, {})).toBe(0); // no MLP width: nothing to weigh, the copy
  const shape = { ...dims, intermediate: 136 }; // the problem's width: 128, whole groups along down's rows
  const key = (M: number) => `decode.q4rows@M=${M},C=64,F=128`;
  gpu.tuning.clear();
  const rows = await tuneQ4Rows(gpu, shape, {});
  const measured = [...gpu.tuning.entries()].filter(([k]) => k.startsWith("decode.q4rows@"));
  expect(measured[0][0]).toBe(key(1));
  for (const [k, e] of measured) expect(Object.keys(e.ms).sort(), k).toEqual(["copy", "nibbles"]);
  // Every row count before the last measured went to the nibbles; the bound is the one before the copy's first win.
  const winners = measured.map(([, e]) => e.winner);
  expect(winners.slice(0, -1).every((w) => w === "nibbles")).toBe(true);
  const lost = winners.indexOf("copy");
  expect(rows).toBe(lost < 0 ? DECODE_ROWS_MAX : [0, 1, 8, 16, 32][lost]);
  // Loaded results decide without timing; the bound stops at the model's decode rows.
  gpu.tuning.clear();
  const entry = (winner: string) => ({ winner, ms: { nibbles: winner === "nibbles" ? 1 : 2, copy: 1.5 } });
  for (const M of [1, 8, 16]) gpu.tuning.set(key(M), entry("nibbles"));
  gpu.tuning.set(key(32), entry("copy"));
  expect(await tuneQ4Rows(gpu, shape, {})).toBe(16);
  expect(await tuneQ4Rows(gpu, shape, {}, 8)).toBe(8);
  gpu.tuning.set(key(1), entry("copy"));
  expect(await tuneQ4Rows(gpu, shape, {})).toBe(0);
  gpu.tuning.clear();
});

it("a candidate that fails on this device (a throw, a shader that does not compile) is left out; all failing throws", async () => {
  const broken = { name: "broken", code: "@compute @workgroup_size(1) fn broken() { let x: u32 = 1.5; }" };
  const warn = console.warn;
  const warnings: string[] = [];
  console.warn = (m: string) => void warnings.push(m);
  const isolated = await getDevice({ robustness: true }); // its error log stays apart from the shared device's
  const [ia, ic] = [isolated.buffer(64 * 64 * 4), isolated.buffer(64 * 64 * 4)];
  try {
    const winner = await tune(isolated, "fails@1", ["throws", "ok", "bad-wgsl"] as const, (cand, rec) => {
      if (cand === "throws") throw new Error("no such variant here");
      if (cand === "bad-wgsl") rec.dispatch(broken, [], 1);
      else matmul(isolated, rec, { a: ia, b: ia, c: ic }, { M: 64, N: 64, K: 64 });
    });
    expect(winner).toBe("ok");
    expect(Object.keys(isolated.tuning.get("fails@1")!.ms)).toEqual(["ok"]);
    expect(warnings.join("\n")).toMatch(/"throws" failed on this device and is left out: no such variant here/);
    expect(warnings.join("\n")).toMatch(/"bad-wgsl" failed on this device/);
    await expect(
      tune(isolated, "fails@2", ["throws"] as const, () => {
        throw new Error("nothing runs");
      }),
    ).rejects.toThrow(/nothing runs/);
  } finally {
    console.warn = warn;
    isolated.release(ia, ic);
  }
});

it("an ordered search stops at the first candidate 3x slower than the best so far", async () => {
  // "1024" is 262144x the work of "16", whose time is mostly a submit's overhead (~1 ms on SwiftShader): a 512 took
  // less than 3x that once while the machine was busy. "32" is never reached.
  const [a, c] = [gpu.buffer(1024 * 1024 * 4), gpu.buffer(1024 * 1024 * 4)];
  const sizes = ["16", "1024", "32"] as const;
  const runs: Record<string, number> = {};
  const winner = await tune(
    gpu,
    "test.ordered",
    sizes,
    (v, rec) => {
      runs[v] = (runs[v] ?? 0) + 1;
      const n = Number(v);
      matmul(gpu, rec, { a, b: a, c }, { M: n, N: n, K: n }, { variant: MATMUL_VARIANTS[0] });
    },
    { minReps: 2, minMs: 0, ordered: true },
  );
  const ms = tuneTable(gpu)[`${deviceKey(gpu)}|test.ordered`].ms;
  expect(runs["32"]).toBeUndefined();
  expect(Object.keys(ms)).toEqual(["16", "1024"]);
  expect(winner).toBe("16");
  gpu.release(a, c);
});
