// Every matmul variant against the CPU reference: modes, B dtypes, odd sizes, batches and broadcast,
// bias, accumulate, alpha, row strides and offsets, weight shards, and the argument checks.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng, packHalf, roundHalf } from "@webart/gpu";
import { assertClose, f64, finiteDiff, type Tolerance } from "@webart/gpu/check";
import {
  ABSMAX_BYTES,
  absMax,
  COOP_STAGINGS,
  coopConfig,
  coopShapes,
  MATMUL_VARIANTS,
  matmul,
  matmulShards,
  matmulVariant,
  type MatmulDims,
  type MatmulOptions,
  type MatmulVariant,
} from "./index.ts";
import { absMaxReference, matmulReference } from "./reference.ts";

// f32 accumulation in a different order (and possibly fused) than the reference: K ≤ 257 terms
// of |x| < 1 give sums below ~20, so 1e-4 relative plus 1e-4 absolute covers it. 16-bit B is
// compared against the reference on the rounded weights, so the same tolerance holds.
const TOL: Tolerance = { atol: 1e-4, rtol: 1e-4 };
const SIZES: [number, number, number][] = [
  [1, 1, 1],
  [7, 13, 5],
  [33, 65, 17],
  [130, 3, 257],
  [140, 131, 9], // more than one 128 x 128 block each way
];

/** Even K and N: every 16-bit row starts on a word. */
const HALF_SIZES: [number, number, number][] = [
  [6, 10, 8],
  [34, 66, 18],
];

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));
afterAll(() => expect(gpu.errors).toEqual([]));

/** Builds random operands for `o` (with a few spare elements), runs the GPU and the reference, compares all of C. */
async function check(g: Gpu, o: MatmulDims & MatmulOptions & { variant: MatmulVariant }, seed: number, bias = false) {
  const rng = new Rng(seed);
  const { M, N, K, mode = "nn", bDtype = "f32", batch = 1 } = o;
  const [tA, tB] = [mode[0] === "t", mode[1] === "t"];
  const lda = o.lda ?? (tA ? M : K);
  const ldb = o.ldb ?? (tB ? K : N);
  const ldc = o.ldc ?? N;
  const sA = o.strideA ?? (tA ? K : M) * lda;
  const sB = o.strideB ?? (tB ? N : K) * ldb;
  const sC = o.strideC ?? M * ldc;
  const size = (off = 0, s: number, rows: number, ld: number) => off + (batch - 1) * s + rows * ld + 3;
  const aVals = rng.f32(size(o.offsetA, sA, tA ? K : M, lda));
  const bVals = rng.f32(size(o.offsetB, sB, tB ? N : K, ldb));
  const cInit = rng.f32(size(o.offsetC, sC, M, ldc));
  const biasVals = rng.f32((o.offsetBias ?? 0) + N + 1);
  // coop multiplies f16 operands: the reference gets them rounded so.
  const coop = o.variant === "coop";
  const bRef = coop
    ? roundHalf(bDtype === "f32" ? bVals : roundHalf(bVals, bDtype), "f16")
    : bDtype === "f32"
      ? bVals
      : roundHalf(bVals, bDtype);
  const ba = g.upload(aVals);
  const bb = g.upload(bDtype === "f32" ? bVals : packHalf(bVals, bDtype));
  const bc = g.upload(cInit);
  const bbias = bias ? g.upload(biasVals) : undefined;
  const rec = g.recorder();
  const { M: _M, N: _N, K: _K, ...opts } = o;
  matmul(g, rec, { a: ba, b: bb, c: bc, bias: bbias }, { M, N, K }, opts);
  const out = rec.read(bc, cInit.byteLength);
  await rec.submit();
  const got = new Float32Array(await out);
  g.release(ba, bb, bc, bbias);
  const want = matmulReference(
    coop ? roundHalf(aVals, "f16") : aVals,
    bRef,
    cInit.slice(),
    { ...o, transA: tA, transB: tB },
    bias ? biasVals : undefined,
  );
  // Tensor cores may round their f32 sums more coarsely than f32 FMA chains.
  assertClose(
    `matmul ${o.variant} ${mode} ${bDtype} ${M}x${N}x${K}`,
    got,
    want,
    coop ? { atol: 1e-3, rtol: 1e-3 } : TOL,
  );
}

describe.each(MATMUL_VARIANTS)("matmul %s", (variant) => {
  it.each(["nn", "nt", "tn", "tt"] as const)("f32 %s at odd sizes", async (mode) => {
    for (const [i, [M, N, K]] of SIZES.entries()) await check(gpu, { M, N, K, mode, variant }, 10 + i);
  });

  // Word-aligned 16-bit rows (even ldb and offset) take the fast paths; odd ones the general path.
  it.each(["bf16", "f16"] as const)("%s B in nn and nt: aligned, odd K / N, odd offsets", async (bDtype) => {
    for (const mode of ["nn", "nt"] as const) {
      for (const [i, [M, N, K]] of [...SIZES.slice(0, 3), ...HALF_SIZES].entries()) {
        await check(gpu, { M, N, K, mode, bDtype, variant }, 20 + i);
        await check(gpu, { M, N, K, mode, bDtype, variant, offsetB: 2 * i + 1, offsetA: i }, 30 + i);
      }
      // Aligned rows with an odd K (nt) or N (nn) inside a padded, even row stride.
      const [M, N, K] = [9, 13, 7];
      await check(gpu, { M, N, K, mode, bDtype, variant, ldb: mode === "nt" ? K + 1 : N + 1, offsetB: 4 }, 40);
    }
  });

  it("batches with per-operand strides, broadcast (stride 0), bias, alpha and accumulate", async () => {
    await check(gpu, { M: 9, N: 35, K: 6, batch: 3, variant }, 40);
    await check(gpu, { M: 9, N: 35, K: 6, batch: 3, strideB: 0, mode: "nt", variant }, 41, true);
    await check(
      gpu,
      { M: 5, N: 7, K: 11, batch: 4, strideA: 0, mode: "tn", alpha: -0.5, accumulate: true, variant },
      42,
    );
    await check(gpu, { M: 17, N: 40, K: 9, bDtype: "bf16", mode: "nt", alpha: 2, accumulate: true, variant }, 43, true);
  });

  it("writes a column range of a wider C (ldc, offsetC) with padded lda/ldb", async () => {
    await check(gpu, { M: 10, N: 21, K: 7, lda: 9, ldb: 30, ldc: 50, offsetC: 13, variant }, 50, true);
    await check(
      gpu,
      { M: 10, N: 21, K: 7, mode: "tn", lda: 12, ldc: 33, offsetC: 5, offsetBias: 3, variant },
      51,
      true,
    );
  });
});

it("nt and tn give the gradients of nn (checked against f64 finite differences)", async () => {
  // loss = sum(C ⊙ G) with C = A·B: dA = G·Bᵀ (nt) and dB = Aᵀ·G (tn), the engine's backward pass.
  const rng = new Rng(80);
  const [M, N, K] = [3, 4, 5];
  const [A, B, G] = [rng.f32(M * K), rng.f32(K * N), rng.f32(M * N)];
  const loss = ([a, b]: Float64Array[]) => {
    let s = 0; // in f64, so the differences are exact to ~1e-10
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) s += G[m * N + n] * a[m * K + k] * b[k * N + n];
    return s;
  };
  const [dA, dB] = finiteDiff(loss, [f64(A), f64(B)]);
  const [ba, bb, bg] = [gpu.upload(A), gpu.upload(B), gpu.upload(G)];
  const [bdA, bdB] = [gpu.buffer(M * K * 4), gpu.buffer(K * N * 4)];
  for (const variant of MATMUL_VARIANTS) {
    const rec = gpu.recorder();
    matmul(gpu, rec, { a: bg, b: bb, c: bdA }, { M, N: K, K: N }, { mode: "nt", variant }); // (M, N)·(K, N)ᵀ
    matmul(gpu, rec, { a: ba, b: bg, c: bdB }, { M: K, N, K: M }, { mode: "tn", variant }); // (M, K)ᵀ·(M, N)
    const [ga, gb] = [rec.read(bdA, M * K * 4), rec.read(bdB, K * N * 4)];
    await rec.submit();
    // GPU f32 sums of ≤ 5 products against f64 differences.
    assertClose(`dA ${variant}`, new Float32Array(await ga), dA, { atol: 1e-5, rtol: 1e-5 });
    assertClose(`dB ${variant}`, new Float32Array(await gb), dB, { atol: 1e-5, rtol: 1e-5 });
  }
  gpu.release(ba, bb, bg, bdA, bdB);
});

it("matmulShards fills one wide C from row-range shards of a 16-bit weight", async () => {
  const rng = new Rng(60);
  const [M, K] = [5, 9];
  const rows = [7, 4, 10];
  const N = rows.reduce((s, r) => s + r, 0);
  const w = rng.f32(N * K); // W (N, K)
  const x = rng.f32(M * K);
  const biasVals = rng.f32(N);
  // Shard 1 starts at an odd element offset inside its buffer, as a split of a packed file would.
  const shards = rows.map((r, i) => {
    const start = rows.slice(0, i).reduce((s, v) => s + v, 0) * K;
    const pad = i === 1 ? 3 : 0;
    const vals = new Float32Array(pad + r * K);
    vals.set(w.subarray(start, start + r * K), pad);
    return { buffer: gpu.upload(packHalf(vals, "bf16")), rows: r, offset: pad };
  });
  const [bx, bc, bbias] = [gpu.upload(x), gpu.buffer(M * N * 4), gpu.upload(biasVals)];
  const rec = gpu.recorder();
  matmulShards(gpu, rec, { a: bx, shards, c: bc, bias: bbias }, { M, K }, { bDtype: "bf16" });
  const out = rec.read(bc, M * N * 4);
  await rec.submit();
  const want = matmulReference(x, roundHalf(w, "bf16"), new Float32Array(M * N), { M, N, K, transB: true }, biasVals);
  assertClose("matmulShards", new Float32Array(await out), want, TOL);
  gpu.release(bx, bc, bbias, ...shards.map((s) => s.buffer));
});

it("the backward through a sharded weight: dx = dy·W accumulated over shards' K ranges", async () => {
  // W (N, C) split by rows into shards; dy (M, N). Shard i holds W[n0:n1], so dx += dy[:, n0:n1]·W[n0:n1].
  const rng = new Rng(61);
  const [M, C] = [6, 11];
  const rows = [5, 8];
  const N = rows[0] + rows[1];
  const w = rng.f32(N * C);
  const dy = rng.f32(M * N);
  const [bdy, bdx] = [gpu.upload(dy), gpu.buffer(M * C * 4)];
  const shards = [w.subarray(0, rows[0] * C), w.subarray(rows[0] * C)].map((v) => gpu.upload(packHalf(v, "f16")));
  for (const variant of MATMUL_VARIANTS) {
    const rec = gpu.recorder();
    matmul(gpu, rec, { a: bdy, b: shards[0], c: bdx }, { M, N: C, K: rows[0] }, { lda: N, bDtype: "f16", variant });
    const o = { lda: N, offsetA: rows[0], bDtype: "f16" as const, accumulate: true, variant };
    matmul(gpu, rec, { a: bdy, b: shards[1], c: bdx }, { M, N: C, K: rows[1] }, o);
    const out = rec.read(bdx, M * C * 4);
    await rec.submit();
    const want = matmulReference(dy, roundHalf(w, "f16"), new Float32Array(M * C), { M, N: C, K: N });
    assertClose(`sharded backward ${variant}`, new Float32Array(await out), want, TOL);
  }
  gpu.release(bdy, bdx, ...shards);
});

it("refuses accesses past a buffer and bad strides, before recording anything", async () => {
  const [a, b, c] = [gpu.buffer(16 * 4), gpu.buffer(16 * 4), gpu.buffer(16 * 4)];
  const rec = gpu.recorder();
  expect(() => matmul(gpu, rec, { a, b, c }, { M: 4, N: 4, K: 5 })).toThrow(/A needs 80 bytes/);
  expect(() => matmul(gpu, rec, { a, b, c }, { M: 4, N: 4, K: 4 }, { offsetC: 1 })).toThrow(/C needs/);
  expect(() => matmul(gpu, rec, { a, b, c }, { M: 4, N: 4, K: 4 }, { lda: 3 })).toThrow(/row stride 3/);
  expect(() => matmul(gpu, rec, { a, b, c }, { M: 4, N: 4, K: 4 }, { batch: 2, strideB: 0 })).toThrow(/A needs/);
  expect(() => matmul(gpu, rec, { a, b, c: a }, { M: 4, N: 4, K: 4 })).toThrow(/alias/);
  matmul(gpu, rec, { a, b, c }, { M: 2, N: 4, K: 8 }, { bDtype: "f16" }); // 32 halves fit in 16 words
  expect(rec.dispatches).toBe(1);
  await rec.submit();
  gpu.release(a, b, c);
});

it("defaults to register blocking on SwiftShader and workgroup tiling elsewhere", () => {
  const v = matmulVariant(gpu, "nt", "bf16");
  expect(v).toBe(/swiftshader/i.test(gpu.kind.architecture) ? "regblock" : "tiled");
});

it("gives the same results with Dawn's robustness on (as in browsers)", async () => {
  const robust = await getDevice({ robustness: true });
  for (const variant of MATMUL_VARIANTS) {
    await check(robust, { M: 33, N: 65, K: 17, mode: "nt", bDtype: "bf16", variant }, 70, true);
  }
  expect(robust.errors).toEqual([]);
});

// The tensor-core variant runs only where the device has f16 subgroup matrices (Dawn's experimental feature on
// NVIDIA's and Apple's GPUs); SwiftShader has none, so there it must refuse clearly. `npm run bench -- gpu` checks it
// on such a GPU with the same kind of reference before timing it.
describe("matmul coop (tensor cores)", () => {
  it("agrees with the reference on f16-rounded operands where the device has them, else names what is missing", async () => {
    const [a, b, c] = [gpu.buffer(64 * 4), gpu.buffer(64 * 4), gpu.buffer(64 * 4)];
    if (!coopConfig(gpu)) {
      const rec = gpu.recorder();
      expect(() => matmul(gpu, rec, { a, b, c }, { M: 8, N: 8, K: 8 }, { variant: "coop" })).toThrow(
        /chromium-experimental-subgroup-matrix and shader-f16/,
      );
      rec.abandon();
      gpu.release(a, b, c);
      return;
    }
    gpu.release(a, b, c);
    for (const coopShape of coopShapes(gpu)) {
      for (const coopStaging of COOP_STAGINGS) {
        const coop = { variant: "coop" as const, coopShape, coopStaging };
        for (const mode of ["nn", "nt", "tn"] as const) {
          for (const [i, [M, N, K]] of SIZES.entries()) await check(gpu, { M, N, K, mode, ...coop }, 80 + i);
        }
        await check(gpu, { M: 140, N: 131, K: 40, mode: "nt", bDtype: "bf16", ...coop }, 90, true);
        await check(gpu, { M: 128, N: 256, K: 64, mode: "nt", bDtype: "bf16", ...coop, accumulate: true }, 91);
        await check(gpu, { M: 72, N: 136, K: 48, mode: "nn", bDtype: "bf16", ...coop, accumulate: true }, 93);
        await check(gpu, { M: 9, N: 35, K: 6, batch: 3, strideB: 0, mode: "nt", ...coop }, 92, true);
      }
    }
  });
});

describe("absMax (the scale of an operand rounded to f16)", () => {
  it.each([
    [1, 0],
    [700, 3],
    [5000, 0], // several workgroups, a partial trip of four loads
    [1_200_000, 17], // 512 workgroups (the most), grid-strided
  ])("n = %i from offset %i", async (n, offset) => {
    const rng = new Rng(n);
    const vals = rng.f32(offset + n + 5, -1e-6, 1e-6);
    const at = offset + Math.floor(n / 2);
    vals[at] = -3e-5; // the largest magnitude, negative
    vals[offset + n] = 9; // past the range: not counted
    if (offset) vals[offset - 1] = -9;
    const [x, out] = [gpu.upload(vals), gpu.buffer(ABSMAX_BYTES)];
    const rec = gpu.recorder();
    absMax(gpu, rec, x, out, n, offset);
    expect(rec.dispatches).toBe(2);
    const got = rec.read(out, 4);
    await rec.submit();
    const ref = absMaxReference(vals, n, offset);
    expect(ref.max).toBe(Math.fround(3e-5));
    expect(new Float32Array(await got)[0]).toBe(ref.max);
    expect(ref.max * ref.scale).toBeGreaterThanOrEqual(2 ** 14); // the scale the coop matmul applies
    expect(ref.max * ref.scale).toBeLessThan(2 ** 15);
    gpu.release(x, out);
  });

  it("refuses a range past x, a small out, and scaleA without the coop variant", () => {
    const [x, out, b, c] = [gpu.buffer(64), gpu.buffer(ABSMAX_BYTES), gpu.buffer(64), gpu.buffer(64)];
    const rec = gpu.recorder();
    expect(() => absMax(gpu, rec, x, out, 16, 1)).toThrow(/x needs 68 bytes/);
    expect(() => absMax(gpu, rec, x, x, 4)).toThrow(/out needs/);
    expect(() => matmul(gpu, rec, { a: x, b, c, scaleA: out }, { M: 2, N: 2, K: 2 }, { variant: "tiled" })).toThrow(
      /scaleA needs the coop variant/,
    );
    expect(rec.dispatches).toBe(0);
    rec.abandon();
    gpu.release(x, out, b, c);
  });

  it("coop with scaleA keeps gradients that f16 alone would lose, where the device has tensor cores", async () => {
    if (!coopConfig(gpu)) return expect(gpu.features.has("chromium-experimental-subgroup-matrix")).toBe(false);
    const [M, N, K] = [70, 40, 96];
    const rng = new Rng(5);
    const av = rng.f32(M * K, -2e-7, 2e-7); // below f16's normal range (6.1e-5)
    const bv = rng.f32(K * N);
    const want = matmulReference(av, roundHalf(bv, "f16"), new Float32Array(M * N), { M, N, K });
    const [a, b, c, s] = [gpu.upload(av), gpu.upload(bv), gpu.buffer(M * N * 4), gpu.buffer(ABSMAX_BYTES)];
    for (const coopShape of coopShapes(gpu)) {
      const rec = gpu.recorder();
      absMax(gpu, rec, a, s, M * K);
      matmul(gpu, rec, { a, b, c, scaleA: s }, { M, N, K }, { variant: "coop", coopShape });
      const out = rec.read(c, M * N * 4);
      await rec.submit();
      // Each operand rounded to f16 after scaling: ~2^-11 relative each, over sums of K terms.
      assertClose(`coop scaled ${coopShape}`, new Float32Array(await out), want, { atol: 1e-8, rtol: 5e-3 });
    }
    gpu.release(a, b, c, s);
  });
});
