// The decode matvec against the CPU reference: f32 and 16-bit W, odd sizes, M from 1 to 64,
// odd element offsets (shards starting mid-word), strided x and y, bias, and the argument checks; its fused
// forms (RMSNorm, segments, LoRA terms, gated activation, accumulate) against the composed references; q4 W (stream
// variant only) against the same references on its dequantized values.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng, packHalf, roundHalf } from "@webart/gpu";
import { assertClose, type Tolerance } from "@webart/gpu/check";
import { dequantizeQ4, q4Bytes, quantizeQ4 } from "../quant/reference.ts";
import { ropeInvFreq } from "../rope/index.ts";
import { ropeQkvReference } from "../rope/reference.ts";
import {
  MATVEC_VARIANTS,
  matvec,
  matvecRopeFits,
  matvecRopePairs,
  matvecShapeKey,
  matvecSpec,
  matvecVariant,
  matvecVariants,
  q4Streamable,
  streamable,
  streamThreads,
  type MatvecDims,
  type MatvecDtype,
  type MatvecOptions,
} from "./index.ts";
import { matvecFusedReference, matvecReference } from "./reference.ts";

// The kernel sums K in WG interleaved partial sums and a tree, the reference left to right: for
// K ≤ 129 terms below 1 in magnitude, 1e-4 absolute + 1e-4 relative. 16-bit W is compared on the
// rounded weights, so the same tolerance holds.
const TOL: Tolerance = { atol: 1e-4, rtol: 1e-4 };
const SIZES: [number, number, number][] = [
  [1, 1, 1],
  [1, 7, 5],
  [2, 13, 17],
  [3, 33, 64],
  [5, 70, 129],
  [64, 5, 19],
  // K a multiple of 8, or of 4 only (rows on 16- or 8-byte boundaries)
  [1, 17, 24],
  [8, 40, 96],
  [4, 9, 20],
  [64, 9, 24],
  [13, 11, 40],
];
/** The variant each check ran (the stream variant hands problems whose rows are not on 16 bytes to workgroup). */
const ran: string[] = [];

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));
afterAll(() => expect(gpu.errors).toEqual([]));

/** W uploaded as `wDtype`, and the values the kernel computes with (16-bit: rounded; q4: the whole array quantized
 *  in groups from element 0, its scales uploaded too, and dequantized). */
function uploadW(g: Gpu, vals: Float32Array, wDtype: MatvecDtype) {
  if (wDtype === "q4") {
    const { nibbles, scales } = quantizeQ4(vals);
    return { w: g.upload(nibbles), scales: g.upload(scales), ref: dequantizeQ4(nibbles, scales, vals.length) };
  }
  if (wDtype === "f32") return { w: g.upload(vals), scales: undefined, ref: vals };
  return { w: g.upload(packHalf(vals, wDtype)), scales: undefined, ref: roundHalf(vals, wDtype) };
}

async function check(g: Gpu, o: MatvecDims & MatvecOptions, seed: number, bias = false, tol = TOL) {
  const rng = new Rng(seed);
  const { M, N, K, wDtype = "f32" } = o;
  const [ldx, ldy] = [o.ldx ?? K, o.ldy ?? N];
  const xVals = rng.f32((o.offsetX ?? 0) + M * ldx + 2);
  const wVals = rng.f32((o.offsetW ?? 0) + N * K + 1);
  const yInit = rng.f32((o.offsetY ?? 0) + M * ldy + 2);
  const biasVals = rng.f32((o.offsetBias ?? 0) + N);
  const W = uploadW(g, wVals, wDtype);
  const [bx, bw, by] = [g.upload(xVals), W.w, g.upload(yInit)];
  const bb = bias ? g.upload(biasVals) : undefined;
  const rec = g.recorder();
  const { M: _M, N: _N, K: _K, ...opts } = o;
  ran.push(matvec(g, rec, { x: bx, w: bw, y: by, bias: bb, scales: W.scales }, { M, N, K }, opts));
  const out = rec.read(by, yInit.byteLength);
  await rec.submit();
  const got = new Float32Array(await out);
  g.release(bx, bw, by, bb, W.scales);
  const want = matvecReference(xVals, W.ref, yInit.slice(), o, bias ? biasVals : undefined, o.offsetBias);
  assertClose(`matvec ${wDtype} ${M}x${N}x${K}`, got, want, tol);
}

describe.each(MATVEC_VARIANTS)("matvec %s", (variant) => {
  it.each(["f32", "bf16", "f16"] as const)("%s W at odd sizes, M = 1..64", async (wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return expect(gpu.features.has("subgroups")).toBe(false);
    for (const [i, [M, N, K]] of SIZES.entries()) await check(gpu, { M, N, K, wDtype, variant }, 100 + i, i % 2 === 1);
  });

  it.each(["f32", "bf16", "f16"] as const)(
    "%s W from an odd offset, into a column range of a wider y",
    async (wDtype) => {
      if (!matvecVariants(gpu).includes(variant)) return;
      const o = { wDtype, variant, offsetW: 5, ldx: 12, offsetX: 2, ldy: 31, offsetY: 7 };
      await check(gpu, { M: 3, N: 10, K: 9, ...o }, 110, true);
      await check(
        gpu,
        { M: 6, N: 70, K: 18, wDtype, variant, offsetW: 1, ldy: 90, offsetY: 19, offsetBias: 3 },
        111,
        true,
      );
      // Offsets that keep rows 16-byte aligned for every dtype (8), or 16-bit rows 8-byte aligned (4).
      await check(gpu, { M: 2, N: 21, K: 16, wDtype, variant, offsetW: 8 }, 112);
      await check(gpu, { M: 7, N: 18, K: 32, wDtype, variant, offsetW: 4 }, 113);
    },
  );
});

it("refuses accesses past a buffer", async () => {
  const [x, w, y] = [gpu.buffer(8 * 4), gpu.buffer(16 * 4), gpu.buffer(8 * 4)];
  const rec = gpu.recorder();
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 3, K: 8 })).toThrow(/W needs 96 bytes/);
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 2, N: 2, K: 8 }, { offsetX: 1 })).toThrow(/x needs/);
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 4, K: 8 }, { wDtype: "bf16", offsetW: 1 })).toThrow(
    /W needs 68 bytes/,
  );
  const segments = [
    { rows: 1, offsetW: 0 },
    { rows: 1, offsetW: 16 },
  ];
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 2, K: 8 }, { segments })).toThrow(/W segment 1 needs 96 bytes/);
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 4, K: 8 }, { ldx: 4 })).toThrow(/x row stride 4 is less/);
  matvec(gpu, rec, { x, w, y }, { M: 1, N: 4, K: 8 }, { wDtype: "bf16" }); // 32 halves fit in 16 words
  expect(rec.dispatches).toBe(1);
  await rec.submit();
  gpu.release(x, w, y);
});

it("gives the same results with Dawn's robustness on (as in browsers)", async () => {
  const robust = await getDevice({ robustness: true });
  for (const variant of matvecVariants(robust)) {
    await check(robust, { M: 5, N: 33, K: 17, wDtype: "bf16", offsetW: 3, variant }, 120, true);
    await check(robust, { M: 5, N: 33, K: 48, wDtype: "bf16", offsetW: 8, variant }, 121, true);
  }
  expect(robust.errors).toEqual([]);
});

/** A fused call on random inputs: W holds the segments at their offsets (gaps between them stay random). */
async function checkFused(
  g: Gpu,
  o: MatvecDims & MatvecOptions & { bias?: boolean },
  seed: number,
  opts: { norm?: boolean; R?: number } = {},
  tol = TOL,
) {
  const rng = new Rng(seed);
  const { M, K, wDtype = "f32" } = o;
  const segs = o.segments!;
  const N = o.N;
  const [ldx, ldy] = [o.ldx ?? K, o.ldy ?? N];
  const wEnd = Math.max(...segs.map((s) => s.offsetW + s.rows * K)) + 1;
  const xVals = rng.f32((o.offsetX ?? 0) + M * ldx + 2, -2, 2);
  const wVals = rng.f32(wEnd);
  const yInit = rng.f32((o.offsetY ?? 0) + M * ldy + 2);
  const nw = rng.f32(K, 0.5, 1.5);
  const biasVals = rng.f32(Math.max(...segs.map((s) => (s.offsetBias ?? 0) + s.rows)));
  const R = opts.R ?? 0;
  const ldt = R * segs.length + 3;
  const tVals = rng.f32(M * ldt);
  const params = rng.f32(Math.max(1, ...segs.map((s) => (s.lora ? s.lora.b + s.rows * s.lora.rank : 0))));
  const up = (a: Float32Array) => g.upload(a);
  const W = uploadW(g, wVals, wDtype);
  const [bx, bw, by] = [up(xVals), W.w, up(yInit)];
  const bb = o.bias ? up(biasVals) : undefined;
  const bn = opts.norm ? up(nw) : undefined;
  const [bt, bp] = R ? [up(tVals), up(params)] : [undefined, undefined];
  const rec = g.recorder();
  const { M: _M, N: _N, K: _K, bias: _bias, ...rest } = o;
  ran.push(
    matvec(
      g,
      rec,
      { x: bx, w: bw, y: by, bias: bb, norm: bn, loraT: bt, loraParams: bp, scales: W.scales },
      { M, N: o.N, K },
      { ...rest, eps: 1e-5, ldt },
    ),
  );
  const out = rec.read(by, yInit.byteLength);
  await rec.submit();
  const got = new Float32Array(await out);
  g.release(bx, bw, by, bb, bn, bt, bp, W.scales);
  const want = matvecFusedReference(xVals, W.ref, yInit.slice(), {
    ...o,
    segments: segs,
    norm: opts.norm ? { weight: nw, eps: 1e-5 } : undefined,
    bias: o.bias ? biasVals : undefined,
    lora: R ? { t: tVals, ldt, params } : undefined,
  });
  assertClose(`fused matvec ${wDtype} ${M}x${N}x${K} ${o.gated ?? ""}`, got, want, tol);
}

/** The segments of a q/k/v-like layout: rows at `gap`-element-aligned offsets (q4: 32), LoRA on the ones marked. */
function segments(rows: number[], K: number, lora: boolean[], R: number, gap = 16) {
  let off = 0;
  let b = 1;
  let bias = 0;
  return rows.map((n, i) => {
    const s = {
      rows: n,
      offsetW: off,
      offsetBias: (bias += i ? rows[i - 1] + 2 : 1),
      ...(lora[i] ? { lora: { rank: R, scale: 0.5 + i, b, tCol: 1 + i * R } } : {}),
    };
    off += Math.ceil((n * K) / gap) * gap + gap;
    b += n * R + 3;
    return s;
  });
}

describe.each(MATVEC_VARIANTS)("fused matvec %s", (variant) => {
  it.each(["f32", "bf16", "f16"] as const)("%s: RMSNorm of x, M = 1..64, odd K", async (wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    for (const [i, [M, N, K]] of [
      [1, 7, 5],
      [3, 33, 64],
      [8, 40, 96],
      [64, 5, 19],
    ].entries()) {
      const segs = segments([N], K, [false], 0);
      await checkFused(gpu, { M, N, K, wDtype, variant, segments: segs }, 200 + i, { norm: true });
    }
  });

  it.each(["f32", "bf16"] as const)("%s: q, k, v as 3 segments with bias, RMSNorm and LoRA on two", async (wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    for (const [i, [M, K]] of [
      [1, 24],
      [5, 33],
      [8, 96],
    ].entries()) {
      const segs = segments([24, 8, 9], K, [true, false, true], 3);
      const o = { M, N: 41, K, wDtype, variant, segments: segs, bias: true };
      await checkFused(gpu, o, 210 + i, { norm: true, R: 3 });
    }
  });

  it.each([
    ["silu", "f32"],
    ["gelu_tanh", "bf16"],
    ["silu", "f16"],
  ] as const)("gate and up as act(gate)·up (%s, %s W), RMSNorm and LoRA", async (gated, wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    for (const [i, [M, F, K]] of [
      [1, 21, 16],
      [4, 37, 31],
      [9, 8, 64],
    ].entries()) {
      const segs = segments([F, F], K, [true, true], 2);
      await checkFused(gpu, { M, N: F, K, wDtype, variant, segments: segs, gated }, 220 + i, { norm: true, R: 2 });
    }
  });

  it.each(["f32", "bf16"] as const)("%s: y += x·Wᵀ + LoRA (the residual add), into a column range", async (wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    const segs = segments([70], 18, [true], 4);
    const o = { M: 6, N: 70, K: 18, wDtype, variant, segments: segs, accumulate: true, ldy: 90, offsetY: 7 };
    await checkFused(gpu, o, 230, { R: 4 });
    await checkFused(gpu, { ...o, M: 1, offsetX: 3, ldx: 20 }, 231, { R: 4 });
    const aligned = { ...o, K: 32, segments: segments([70], 32, [true], 4) };
    await checkFused(gpu, aligned, 232, { R: 4 });
    await checkFused(gpu, { ...aligned, M: 1, offsetX: 4, ldx: 40 }, 233, { R: 4 });
  });
});

describe.each(MATVEC_VARIANTS)("matvec %s with the rows split over workgroups (rowBlocks)", (variant) => {
  it.each(["f32", "bf16"] as const)("%s: plain, RMSNorm and LoRA, gated, accumulating", async (wDtype) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    for (const [i, [M, rowBlocks]] of [
      [13, 2],
      [64, 8],
      [5, 5],
      [33, 100], // more blocks than passes: one a pass
    ].entries()) {
      await check(gpu, { M, N: 21, K: 24, wDtype, variant, rowBlocks }, 280 + i, true);
      const segs = segments([24, 8], 32, [true, true], 3);
      const o = { M, N: 32, K: 32, wDtype, variant, segments: segs, bias: true, rowBlocks };
      await checkFused(gpu, o, 284 + i, { norm: true, R: 3 });
      const gated = { M, N: 9, K: 24, wDtype, variant, segments: segments([9, 9], 24, [true, false], 2), rowBlocks };
      await checkFused(gpu, { ...gated, gated: "silu" }, 288 + i, { norm: true, R: 2 });
      const acc = { M, N: 11, K: 16, wDtype, variant, segments: segments([11], 16, [true], 4), accumulate: true };
      await checkFused(gpu, { ...acc, rowBlocks, ldy: 15, offsetY: 2 }, 292 + i, { R: 4 });
    }
  });
});

/**
 * The q|k|v matvec with RoPE and the cache write in its epilogue, against the CPU's matvec (RMSNorm, bias, LoRA on q
 * and v) then ropeQkv: q out, and the whole k and v caches (rows not written keep their values). Row 1 of each
 * problem is padding (slot past the caches): it writes q only.
 */
async function checkRope(
  g: Gpu,
  variant: (typeof MATVEC_VARIANTS)[number],
  wDtype: "f32" | "bf16" | "q4",
  dims: { M: number; H: number; KV: number; D: number; K: number },
  seed: number,
): Promise<string> {
  const { M, H, KV, D, K } = dims;
  const [slots, tmax] = [3, 7];
  const rng = new Rng(seed);
  const segs = segments([H * D, KV * D, KV * D], K, [true, false, true], 2, wDtype === "q4" ? 32 : 16);
  const N = (H + 2 * KV) * D;
  const xVals = rng.f32(M * K);
  const wVals = rng.f32(segs[2].offsetW + KV * D * K + 16);
  const biasVals = rng.f32(segs[2].offsetBias! + KV * D + 1);
  const nw = rng.f32(K, 0.5, 1.5);
  const ldt = 8;
  const tVals = rng.f32(M * ldt);
  const params = rng.f32(Math.max(...segs.map((s) => (s.lora ? s.lora.b + s.rows * s.lora.rank : 0))));
  const slotPos = new Uint32Array(2 * M);
  for (let m = 0; m < M; m++)
    [slotPos[2 * m], slotPos[2 * m + 1]] = m === 1 ? [slots, 0] : [m % slots, (3 * m + 1) % tmax];
  const invFreq = ropeInvFreq(D, 10000);
  const cache = slots * tmax * KV * D;
  const [kc0, vc0, q0] = [rng.f32(cache), rng.f32(cache), rng.f32(M * H * D)];
  const up = (a: Float32Array | Uint32Array) => g.upload(a);
  const W = uploadW(g, wVals, wDtype);
  const bw = W.w;
  const [bx, bb, bn, bt, bp, bq, bkc, bvc, bsp, bif] = [
    up(xVals),
    up(biasVals),
    up(nw),
    up(tVals),
    up(params),
    up(q0),
    up(kc0),
    up(vc0),
    up(slotPos),
    up(invFreq),
  ];
  const rec = g.recorder();
  const ran = matvec(
    g,
    rec,
    {
      x: bx,
      w: bw,
      y: bq,
      bias: bb,
      norm: bn,
      loraT: bt,
      loraParams: bp,
      rope: { slotPos: bsp, invFreq: bif, kc: bkc, vc: bvc },
      scales: W.scales,
    },
    { M, N, K },
    { wDtype, variant, segments: segs, eps: 1e-5, ldt, rope: { heads: H, kvHeads: KV, headDim: D, slots, tmax } },
  );
  const reads = [bq, bkc, bvc].map((b) => rec.read(b, b.size));
  await rec.submit();
  const [q, kc, vc] = (await Promise.all(reads)).map((r) => new Float32Array(r));
  g.release(bx, bw, bb, bn, bt, bp, bq, bkc, bvc, bsp, bif, W.scales);
  const qkv = matvecFusedReference(xVals, W.ref, new Float32Array(M * N), {
    M,
    K,
    segments: segs,
    norm: { weight: nw, eps: 1e-5 },
    bias: biasVals,
    lora: { t: tVals, ldt, params },
  });
  const want = ropeQkvReference(qkv, slotPos, invFreq, kc0, vc0, { n: M, h: H, kv: KV, d: D, ldq: N, slots, tmax });
  const what = `matvec+RoPE ${variant} ${wDtype} M=${M} H=${H} KV=${KV} D=${D} K=${K}`;
  assertClose(`${what}: q`, q.subarray(0, M * H * D), want.q, TOL);
  assertClose(`${what}: k cache`, kc.subarray(0, cache), want.kc, TOL);
  assertClose(`${what}: v cache`, vc.subarray(0, cache), want.vc, TOL);
  return ran;
}

describe("matvec with RoPE and the KV cache write (q|k|v in one dispatch)", () => {
  it.each(MATVEC_VARIANTS)("%s: RMSNorm, bias, LoRA, q out and both caches, a padding row", async (variant) => {
    if (!matvecVariants(gpu).includes(variant)) return;
    expect(matvecRopeFits(gpu)).toBe(true); // SwiftShader allows 12 storage buffers a stage
    const runs: string[] = [];
    for (const wDtype of ["f32", "bf16"] as const) {
      // Head dims whose halves each variant pairs in runs (stream at K = 32: 8 columns a workgroup, pairs 4 apart).
      runs.push(await checkRope(gpu, variant, wDtype, { M: 1, H: 4, KV: 2, D: 16, K: 32 }, 300));
      runs.push(await checkRope(gpu, variant, wDtype, { M: 5, H: 2, KV: 1, D: 32, K: 64 }, 301));
      // D/2 = 6: too few for the subgroup variant's pairs 8 apart (and stream's 4): the workgroup variant runs it.
      runs.push(await checkRope(gpu, variant, wDtype, { M: 3, H: 3, KV: 3, D: 12, K: 40 }, 302));
    }
    expect(runs.slice(0, 2)).toEqual([variant, variant]);
    expect(runs[2]).toBe("workgroup");
  });

  it("pairs columns within a head's halves for each variant", () => {
    expect(matvecRopePairs("workgroup", "bf16", 896, 64)).toBe(2);
    expect(matvecRopePairs("subgroup", "bf16", 896, 64)).toBe(8);
    expect(matvecRopePairs("stream", "bf16", 896, 64)).toBe(4); // T = 32: 8 columns a workgroup
    expect(matvecRopePairs("stream", "bf16", 4096, 128)).toBe(1); // T = 128: 2 columns
    expect(matvecRopePairs("stream", "bf16", 8192, 128)).toBe(0); // T = 256: 1 column, no pairs
    expect(matvecRopePairs("subgroup", "f32", 896, 12)).toBe(0);
  });

  it("refuses RoPE without its buffers, on the wrong segments, gated, or into a cache that is too small", () => {
    const [x, w, y] = [gpu.buffer(64 * 4), gpu.buffer(64 * 64 * 4), gpu.buffer(64 * 4)];
    const [sp, inv, kc, vc] = [gpu.buffer(8), gpu.buffer(8 * 4), gpu.buffer(3 * 7 * 16 * 4), gpu.buffer(16)];
    const rope = { heads: 2, kvHeads: 1, headDim: 16, slots: 3, tmax: 7 };
    const segs = [32, 16, 16].map((rows, i) => ({ rows, offsetW: i * 32 * 16 }));
    const rec = gpu.recorder();
    const all = { slotPos: sp, invFreq: inv, kc, vc };
    const go = (o: object, b: object | undefined = all) =>
      matvec(gpu, rec, { x, w, y, rope: b as never }, { M: 1, N: 64, K: 16 }, { segments: segs, rope, ...o });
    expect(() => go({}, undefined)).toThrow(/v cache needs/); // undefined: the default, all four
    expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 64, K: 16 }, { segments: segs, rope })).toThrow(
      /needs both options.rope and buffers.rope/,
    );
    expect(() => go({ segments: [64, 0, 0].slice(0, 1).map((rows) => ({ rows, offsetW: 0 })) })).toThrow(
      /segments q, k, v of 32, 16, 16 rows/,
    );
    expect(() => go({})).toThrow(/v cache needs/);
    expect(() => go({}, { slotPos: sp, invFreq: inv, kc, vc: kc })).toThrow(/must not alias/);
    expect(rec.dispatches).toBe(0);
    rec.abandon();
    gpu.release(x, w, y, sp, inv, kc, vc);
  });
});

it("the stream variant runs every problem whose rows of W start on 16 bytes, the workgroup variant the rest", () => {
  // Tallied over the checks above (vitest runs a file's tests in order).
  const mine = ran.filter((v) => v === "stream").length;
  expect(mine).toBeGreaterThanOrEqual(40);
  // The columns variant needs the same 16-byte rows: it ran the same problems as stream.
  expect(ran.filter((v) => v === "columns").length).toBe(mine);
  expect(ran.filter((v) => v === "workgroup").length).toBeGreaterThan(mine);
  expect(streamable("bf16", 24, [0, 16, 200])).toBe(true);
  expect(streamable("bf16", 20, [0])).toBe(false);
  expect(streamable("f16", 24, [4])).toBe(false);
  expect(streamable("f32", 20, [4, 8])).toBe(true);
  // x is read 16 bytes at a time too: its rows must start on 16 bytes.
  expect(streamable("bf16", 24, [0], { offset: 4, ld: 28 })).toBe(true);
  expect(streamable("bf16", 24, [0], { offset: 1, ld: 24 })).toBe(false);
  expect(streamable("bf16", 24, [0], { offset: 0, ld: 26 })).toBe(false);
});

describe("stream matvec at long K", () => {
  it("gives a column 32 to 256 threads, about four 16-byte vectors of its row each", () => {
    expect(streamThreads("bf16", 896)).toBe(32); // Qwen2.5-0.5B's hidden size: 112 vectors
    expect(streamThreads("bf16", 4864)).toBe(256); // its intermediate size (down): 608 vectors
    expect(streamThreads("bf16", 2048)).toBe(64);
    expect(streamThreads("bf16", 2056)).toBe(128);
    expect(streamThreads("f32", 2048)).toBe(128);
    expect(streamThreads("bf16", 8)).toBe(32);
  });

  // Every width, a K past 4 vectors a thread (two trips of the loop, the second partial) and M over one pass. Sums of
  // ~1000-8000 terms in f32 (the normed, gated ones up to ~3): 1e-3 (the workgroup variant is off by up to 6e-4 at
  // K = 1032 and 1.6e-2 at 8200 on the same inputs).
  const LONG: Tolerance = { atol: 1e-3, rtol: 1e-3 };
  it.each([
    ["bf16", 1032, 64],
    ["bf16", 2056, 128],
    ["f32", 2056, 256],
    ["f16", 8200, 256],
  ] as const)("%s W, K = %i (%i threads a column)", async (wDtype, K, T) => {
    expect(streamThreads(wDtype, K)).toBe(T);
    await check(gpu, { M: 11, N: 11, K, wDtype, variant: "stream" }, 240 + T, true, LONG);
    await check(
      gpu,
      { M: 1, N: 3, K, wDtype, variant: "stream", offsetW: 8, ldx: K + 4, offsetX: 4 },
      250 + T,
      false,
      LONG,
    );
    const segs = segments([9, 9], K, [true, false], 2);
    const o = { M: 2, N: 9, K, wDtype, variant: "stream" as const, segments: segs, gated: "silu" as const };
    await checkFused(gpu, o, 260 + T, { norm: true, R: 2 }, LONG);
    expect(ran.slice(-3)).toEqual(["stream", "stream", "stream"]);
  });
});

describe("columns matvec at many rows", () => {
  // Every pass size (MT up to 32, 16 gated), several passes, and the x² sums of rows past the lanes (MT = 32 > 16
  // columns: each lane sums two rows). Same tolerance as the stream variant's long K.
  const LONG: Tolerance = { atol: 1e-3, rtol: 1e-3 };
  it.each(["f32", "bf16", "f16"] as const)(
    "%s W: plain with bias, RMSNorm, gated, accumulating, M = 9..64",
    async (wDtype) => {
      for (const [i, [M, K]] of [
        [9, 1032],
        [32, 96],
        [33, 2056],
        [64, 40],
      ].entries()) {
        await check(gpu, { M, N: 37, K, wDtype, variant: "columns" }, 500 + i, true, LONG);
        const normed = {
          M,
          N: 41,
          K,
          wDtype,
          variant: "columns" as const,
          segments: segments([24, 17], K, [true, false], 3),
        };
        await checkFused(gpu, { ...normed, bias: true }, 510 + i, { norm: true, R: 3 }, LONG);
        const segs = segments([19, 19], K, [true, false], 2);
        const gated = { M, N: 19, K, wDtype, variant: "columns" as const, segments: segs, gated: "silu" as const };
        await checkFused(gpu, gated, 520 + i, { norm: true, R: 2 }, LONG);
        const acc = { M, N: 23, K, wDtype, variant: "columns" as const, segments: segments([23], K, [true], 4) };
        await checkFused(gpu, { ...acc, accumulate: true, ldy: 30, offsetY: 4 }, 530 + i, { R: 4 }, LONG);
      }
      expect(ran.slice(-4)).toEqual(["columns", "columns", "columns", "columns"]);
    },
  );

  it.each(["f32", "bf16"] as const)("%s W: RoPE and the cache write at 20 and 21 rows", async (wDtype) => {
    expect(await checkRope(gpu, "columns", wDtype, { M: 20, H: 4, KV: 2, D: 16, K: 32 }, 540)).toBe("columns");
    expect(await checkRope(gpu, "columns", wDtype, { M: 21, H: 2, KV: 1, D: 32, K: 64 }, 541)).toBe("columns");
  });
});

it("refuses inconsistent fused options", () => {
  const [x, w, y] = [gpu.buffer(64 * 4), gpu.buffer(64 * 4), gpu.buffer(64 * 4)];
  const rec = gpu.recorder();
  const segs = [
    { rows: 2, offsetW: 0 },
    { rows: 3, offsetW: 16 },
  ];
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 4, K: 8 }, { segments: segs })).toThrow(/segments give 5/);
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 2, K: 8 }, { segments: segs, gated: "silu" })).toThrow(
    /equal rows/,
  );
  const lora = [{ rows: 2, offsetW: 0, lora: { rank: 2, scale: 1, b: 0, tCol: 0 } }];
  expect(() => matvec(gpu, rec, { x, w, y }, { M: 1, N: 2, K: 8 }, { segments: lora })).toThrow(/no lora inputs/);
  expect(() => matvec(gpu, rec, { x, w, y: x }, { M: 1, N: 2, K: 8 })).toThrow(/alias/);
  expect(rec.dispatches).toBe(0);
  rec.abandon();
  gpu.release(x, w, y);
});

describe("q4 W (4-bit, the stream variant only)", () => {
  // Against the references on the dequantized values (what the kernel computes with), so the same tolerances as the
  // other dtypes: TOL up to K = 96, the stream variant's long-K one past it.
  const LONG: Tolerance = { atol: 1e-3, rtol: 1e-3 };
  const q4 = { wDtype: "q4" as const };

  it("plain with bias, M = 1..64, from an offset into a column range, whatever variant is asked for", async () => {
    for (const [i, [M, N, K]] of [
      [1, 7, 64],
      [5, 33, 96],
      [33, 9, 32],
      [64, 5, 64],
    ].entries())
      await check(gpu, { M, N, K, ...q4 }, 600 + i, i % 2 === 0);
    const strided = { ...q4, offsetW: 96, ldx: 68, offsetX: 4, ldy: 31, offsetY: 7, offsetBias: 3 };
    await check(gpu, { M: 3, N: 10, K: 64, ...strided, variant: "workgroup" }, 604, true);
    await check(gpu, { M: 2, N: 12, K: 64, ...q4, variant: "columns", tuning: { columnsAbove: 0 } }, 605);
    expect(ran.slice(-6)).toEqual(Array(6).fill("stream"));
  });

  it.each([
    [896, 8], // Qwen2.5-0.5B's hidden size: 28 vectors a row, about four a thread
    [4864, 64], // its intermediate size: 152 vectors, the last trip partial
    [8224, 128],
    [16416, 256],
  ])("K = %i (%i threads a column)", async (K, T) => {
    expect(streamThreads("q4", K)).toBe(T);
    await check(gpu, { M: 5, N: 7, K, ...q4 }, 610 + T, true, LONG);
    if (T > 64) return;
    const segs = segments([9, 9], K, [true, false], 2, 32);
    const o = { M: 2, N: 9, K, ...q4, segments: segs, gated: "silu" as const };
    await checkFused(gpu, o, 620 + T, { norm: true, R: 2 }, LONG);
  });

  it("RMSNorm of x, M = 1..64", async () => {
    for (const [i, [M, N, K]] of [
      [1, 7, 64],
      [5, 33, 96],
      [33, 8, 32],
      [64, 5, 64],
    ].entries()) {
      const segs = segments([N], K, [false], 0, 32);
      await checkFused(gpu, { M, N, K, ...q4, segments: segs }, 630 + i, { norm: true });
    }
  });

  it.each(["silu", "gelu_tanh"] as const)("gate and up as act(gate)·up (%s), RMSNorm, LoRA on both", async (gated) => {
    for (const [i, [M, F, K]] of [
      [1, 21, 32],
      [5, 37, 64],
      [64, 8, 96],
    ].entries()) {
      const segs = segments([F, F], K, [true, true], 2, 32);
      await checkFused(gpu, { M, N: F, K, ...q4, segments: segs, gated }, 640 + i, { norm: true, R: 2 });
    }
  });

  it("q, k, v as 3 segments with bias, RMSNorm and LoRA on two", async () => {
    for (const [i, [M, K]] of [
      [1, 32],
      [5, 64],
      [33, 96],
    ].entries()) {
      const segs = segments([24, 8, 9], K, [true, false, true], 3, 32);
      await checkFused(gpu, { M, N: 41, K, ...q4, segments: segs, bias: true }, 650 + i, { norm: true, R: 3 });
    }
  });

  it("y += x·Wᵀ + bias + LoRA (the residual add), into a column range", async () => {
    const segs = segments([70], 64, [true], 4, 32);
    const o = { M: 6, N: 70, K: 64, ...q4, segments: segs, accumulate: true, bias: true, ldy: 90, offsetY: 7 };
    await checkFused(gpu, o, 660, { R: 4 });
    await checkFused(gpu, { ...o, M: 1, offsetX: 4, ldx: 68 }, 661, { R: 4 });
  });

  it("rows split over workgroups (rowBlocks): plain, RMSNorm and LoRA, gated", async () => {
    for (const [i, [M, rowBlocks]] of [
      [13, 2],
      [64, 8],
      [33, 100],
    ].entries()) {
      await check(gpu, { M, N: 21, K: 32, ...q4, rowBlocks }, 670 + i, true);
      const segs = segments([24, 8], 64, [true, true], 3, 32);
      await checkFused(gpu, { M, N: 32, K: 64, ...q4, segments: segs, bias: true, rowBlocks }, 674 + i, {
        norm: true,
        R: 3,
      });
      const gated = { M, N: 9, K: 32, ...q4, segments: segments([9, 9], 32, [true, false], 2, 32), rowBlocks };
      await checkFused(gpu, { ...gated, gated: "gelu_tanh" }, 678 + i, { norm: true, R: 2 });
    }
  });

  it("RoPE and the cache write (12 storage buffers), RMSNorm, bias, LoRA, a padding row", async () => {
    expect(matvecRopeFits(gpu, "q4")).toBe(true); // SwiftShader allows 12 storage buffers a stage
    // At these K a column has 8 threads, a workgroup 32 columns: pairs 16 apart, so D/2 a multiple of 16.
    expect(await checkRope(gpu, "workgroup", "q4", { M: 1, H: 4, KV: 2, D: 32, K: 32 }, 690)).toBe("stream");
    expect(await checkRope(gpu, "stream", "q4", { M: 5, H: 2, KV: 1, D: 32, K: 64 }, 691)).toBe("stream");
    expect(await checkRope(gpu, "stream", "q4", { M: 21, H: 2, KV: 2, D: 64, K: 96 }, 692)).toBe("stream");
  });

  it("counts its storage buffers, threads, pairs and pipelines apart from the other dtypes", () => {
    const limit = (n: number) => ({ limits: { maxStorageBuffersPerShaderStage: n } }) as unknown as Gpu;
    expect([matvecRopeFits(limit(11)), matvecRopeFits(limit(11), "bf16"), matvecRopeFits(limit(11), "q4")]).toEqual([
      true,
      true,
      false,
    ]);
    expect(matvecRopeFits(limit(12), "q4")).toBe(true);
    // q4 runs the stream variant whatever is asked: its pairs are stream's (T = 8 at K = 896: pairs 16 apart).
    expect(matvecRopePairs("subgroup", "q4", 896, 64)).toBe(16);
    expect(matvecRopePairs("stream", "q4", 8224, 64)).toBe(1);
    expect(matvecVariant(gpu, "q4", { bf16: "workgroup", columnsAbove: 0 }, undefined, 8)).toBe("stream");
    const keys = (["f32", "bf16", "f16", "q4"] as const).map((d) => matvecShapeKey(d, 896, 4864, true));
    expect(new Set(keys).size).toBe(4);
    const spec = matvecSpec("stream", "q4", 4);
    expect(spec).not.toBe(matvecSpec("stream", "f16", 4));
    expect(spec).not.toBe(matvecSpec("columns", "f32", 4, false, undefined, 0));
    expect(spec.overrides?.W_KIND).toBe(3);
    expect(spec.code).toContain("@binding(8) var<storage, read> scales");
    expect(matvecSpec("stream", "q4", 4, false, undefined, 32, 4).code).toContain(
      "@binding(12) var<storage, read> scales",
    );
    expect(matvecSpec("stream", "bf16", 4).code).not.toContain("var<storage, read> scales");
    expect(() => matvecSpec("workgroup", "q4", 4)).toThrow(/stream variant only/);
    expect(q4Streamable(64, [0, 96, 32 * 1000])).toBe(true);
    expect(q4Streamable(48, [0])).toBe(false);
    expect(q4Streamable(64, [0, 16])).toBe(false);
    expect(q4Streamable(64, [0], { offset: 2, ld: 64 })).toBe(false);
    expect(q4Streamable(64, [0], { offset: 4, ld: 68 })).toBe(true);
    expect(streamable("q4", 64, [32])).toBe(true);
  });

  it("refuses a problem it cannot stream, missing or stray scales, and buffers too small", () => {
    const [x, y] = [gpu.buffer(128 * 4), gpu.buffer(128 * 4)];
    // Exact sizes ("weights": rounded to 16 bytes): W 96 bytes (3 rows of 64), scales 16 (12 needed, 20 for 5 rows).
    const [w, w5] = [gpu.buffer(q4Bytes(3 * 64).nibbles, "weights"), gpu.buffer(q4Bytes(5 * 64).nibbles, "weights")];
    const scales = gpu.buffer(q4Bytes(3 * 64).scales, "weights");
    const rec = gpu.recorder();
    const go = (dims: MatvecDims, o: MatvecOptions = {}, b: object = {}) =>
      matvec(gpu, rec, { x, w, y, scales, ...b }, dims, { wDtype: "q4", ...o });
    expect(() => go({ M: 1, N: 2, K: 48 })).toThrow(/q4 W needs K \(48\) to be a multiple of 32.*q4Streamable/);
    expect(() => go({ M: 1, N: 2, K: 64 }, { offsetW: 16 })).toThrow(
      /q4 W needs offsetW \(16\) to be a multiple of 32/,
    );
    const segs = [
      { rows: 1, offsetW: 0 },
      { rows: 1, offsetW: 80 },
    ];
    expect(() => go({ M: 1, N: 2, K: 64 }, { segments: segs })).toThrow(/segment 1's offsetW \(80\)/);
    expect(() => go({ M: 1, N: 2, K: 64 }, { offsetX: 2 })).toThrow(/offsetX \(2\) and ldx \(64\) multiples of 4/);
    expect(() => go({ M: 1, N: 2, K: 64 }, {}, { scales: undefined })).toThrow(/q4 W needs buffers.scales/);
    expect(() => go({ M: 1, N: 2, K: 64 }, { wDtype: "bf16" })).toThrow(/buffers.scales is for q4 W/);
    expect(() => go({ M: 1, N: 4, K: 64 })).toThrow(/W needs 128 bytes .* has 96/);
    expect(() => go({ M: 1, N: 3, K: 64 }, { offsetW: 64 })).toThrow(/W needs 128 bytes/);
    expect(() => go({ M: 1, N: 5, K: 64 }, {}, { w: w5 })).toThrow(/scales needs 20 bytes .* has 16/);
    expect(() => go({ M: 1, N: 2, K: 64 }, {}, { scales: y })).toThrow(/must not alias/);
    go({ M: 1, N: 3, K: 64 }); // 192 nibbles in 96 bytes, 6 scales in 12
    expect(rec.dispatches).toBe(1);
    rec.abandon();
    gpu.release(x, y, w, w5, scales);
  });

  it("refuses RoPE whose head dim the stream variant cannot pair", () => {
    const [x, y, w, s] = [gpu.buffer(64 * 4), gpu.buffer(64 * 4), gpu.buffer(48 * 64), gpu.buffer(48 * 4)];
    const [sp, inv, kc, vc] = [
      gpu.buffer(8),
      gpu.buffer(8 * 4),
      gpu.buffer(3 * 7 * 12 * 4),
      gpu.buffer(3 * 7 * 12 * 4),
    ];
    const segs = [12, 6, 6].map((rows, i) => ({ rows, offsetW: i * 12 * 64 }));
    const rec = gpu.recorder();
    expect(() =>
      matvec(
        gpu,
        rec,
        { x, w, y, scales: s, rope: { slotPos: sp, invFreq: inv, kc, vc } },
        { M: 1, N: 24, K: 64 },
        { wDtype: "q4", segments: segs, rope: { heads: 2, kvHeads: 1, headDim: 6, slots: 3, tmax: 7 } },
      ),
    ).toThrow(/own 32 columns at K = 64: RoPE needs D\/2 \(3\) to be a multiple of 16/);
    expect(rec.dispatches).toBe(0);
    rec.abandon();
    gpu.release(x, y, w, s, sp, inv, kc, vc);
  });
});
