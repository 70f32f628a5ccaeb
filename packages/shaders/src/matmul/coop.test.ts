// The coop (tensor-core) matmul's staging, on any device: SwiftShader has no subgroup matrices, so the products
// themselves are checked only on GPUs that have them (matmul.test.ts, `npm run bench -- gpu`, and start-up tuning,
// which runs vectorised staging only where it agrees with scalar staging). What moves op(A) and op(B) into workgroup
// memory is the same generated code in both kernels, so here it runs in a kernel that writes each staged slice out,
// against the slices worked out on the CPU: scalar and vectorised loads, every layout, ragged edges, offsets, row
// strides and batches.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDevice, Params, packHalf, roundHalf, Rng, type Gpu } from "@webart/gpu";
import { COOP_SHAPES, coopBlock, coopStagingOf, coopStagingTestCode, coopVectorB, type CoopGeometry } from "./coop.ts";
import { coopStagingFor, type MatmulMode, type WeightDtype } from "./index.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));
afterAll(() => expect(gpu.errors).toEqual([]));

const B_KIND: Record<WeightDtype, number> = { f32: 0, bf16: 1, f16: 2 };

interface Problem {
  mode: MatmulMode;
  bDtype: WeightDtype;
  M: number;
  N: number;
  K: number;
  batch?: number;
  lda?: number;
  ldb?: number;
  offA?: number;
  offB?: number;
  sA?: number;
  sB?: number;
}

/** Each staged slice of every block, by the kernel and by the CPU, compared exactly (staging only moves values). */
async function checkStaging(g: CoopGeometry, pr: Problem, vec: boolean, seed: number): Promise<void> {
  const { mode, bDtype, M, N, K, batch = 1, offA = 0, offB = 0 } = pr;
  const [tA, tB] = [mode[0] === "t", mode[1] === "t"];
  const lda = pr.lda ?? (tA ? M : K);
  const ldb = pr.ldb ?? (tB ? K : N);
  const sA = pr.sA ?? (tA ? K : M) * lda;
  const sB = pr.sB ?? (tB ? N : K) * ldb;
  const kind = B_KIND[bDtype];
  const want = coopStagingFor(vec ? "vec" : "scalar", mode, bDtype, { N, K, batch, lda, ldb, offA, offB, sA, sB });
  const st = coopStagingOf(g, kind, want);
  // The cases below are chosen so that what is asked for is what runs.
  expect(st).toEqual(want);
  const rng = new Rng(seed);
  const av = rng.f32(offA + (batch - 1) * sA + (tA ? K : M) * lda);
  const bRaw = rng.f32(offB + (batch - 1) * sB + (tB ? N : K) * ldb + 8);
  const bv = bDtype === "f32" ? bRaw : roundHalf(bRaw, bDtype);
  const { BM, BN } = coopBlock(g);
  const { BK } = g;
  const [gx, gy] = [Math.ceil(N / BN), Math.ceil(M / BM)];
  const slices = Math.ceil(K / BK);
  const per = (BM + BN) * BK;
  const outLen = gx * gy * batch * slices * per;
  const a = gpu.upload(av);
  const b = gpu.upload(bDtype === "f32" ? bRaw : packHalf(bRaw, bDtype));
  const c = gpu.buffer(outLen * 4);
  const rec = gpu.recorder();
  const flags = (tA ? 1 : 0) | (tB ? 2 : 0);
  const params = new Params().u32(M, N, K, flags, lda, ldb, N).f32(1).u32(offA, offB, 0, 0, sA, sB, 0);
  const spec = { name: "coop_staging", code: coopStagingTestCode(g, kind, st), overrides: { B_KIND: kind } };
  rec.dispatch(spec, [a, b, a, c], [gx, gy, batch], params);
  const read = rec.read(c, outLen * 4);
  await rec.submit();
  const got = new Float32Array(await read);
  gpu.release(a, b, c);

  const expected = new Float32Array(outLen);
  const A = (z: number, m: number, k: number) => av[offA + z * sA + (tA ? k * lda + m : m * lda + k)];
  const B = (z: number, k: number, n: number) => bv[offB + z * sB + (tB ? n * ldb + k : k * ldb + n)];
  for (let z = 0; z < batch; z++)
    for (let by = 0; by < gy; by++)
      for (let bx = 0; bx < gx; bx++)
        for (let s = 0; s < slices; s++) {
          const base = (((z * gy + by) * gx + bx) * slices + s) * per;
          for (let m = 0; m < BM; m++)
            for (let k = 0; k < BK; k++) {
              const [gm, gk] = [by * BM + m, s * BK + k];
              expected[base + m * BK + k] = gm < M && gk < K ? A(z, gm, gk) : 0;
            }
          for (let n = 0; n < BN; n++)
            for (let k = 0; k < BK; k++) {
              const [gn, gk] = [bx * BN + n, s * BK + k];
              expected[base + BM * BK + n * BK + k] = gn < N && gk < K ? B(z, gk, gn) : 0;
            }
        }
  let bad = -1;
  for (let i = 0; i < outLen && bad < 0; i++) if (got[i] !== expected[i]) bad = i;
  if (bad >= 0) {
    const within = bad % per;
    const where =
      within < BM * BK
        ? `A[${Math.floor(within / BK)}][${within % BK}]`
        : `B[${Math.floor((within - BM * BK) / BK)}][${within % BK}]`;
    throw new Error(
      `staging ${JSON.stringify(st)} ${mode} ${bDtype}: element ${bad} (slice-relative ${where}) is ${got[bad]}, want ${expected[bad]}`,
    );
  }
}

/** Geometries of each coop shape that SwiftShader runs: 256 threads (subgroups of 256 / (WM · WN) lanes) and
 *  matrices of 2048 / (BK · WM · TM) rows (64 x 64 blocks of 32-deep slices, 32 x 32 of 64-deep ones), so at most 8
 *  elements a thread (scalar staging of 16 a thread takes SwiftShader's compiler minutes) and 20 KiB of f32
 *  workgroup memory. */
function geometries(): [string, CoopGeometry][] {
  return Object.entries(COOP_SHAPES).map(([name, s]) => {
    const S = 2048 / (s.BK * s.WM * s.TM);
    return [name, { SM: S, SN: S, SK: S, ...s, SG: 256 / (s.WM * s.WN) }];
  });
}

describe("coop matmul staging (runs without tensor cores)", () => {
  const problems: [string, Problem][] = [
    // The projections (nt, bf16 weights): rows of A and B read along k; ragged M, N and K, offsets, strides, batches.
    [
      "nt bf16, batched",
      {
        mode: "nt",
        bDtype: "bf16",
        M: 70,
        N: 72,
        K: 200,
        batch: 2,
        lda: 208,
        ldb: 216,
        offA: 4,
        offB: 8,
        sA: 14568,
        sB: 15560,
      },
    ],
    // Backward's input gradients (nn, bf16 weights): B read along n.
    ["nn bf16", { mode: "nn", bDtype: "bf16", M: 33, N: 40, K: 44, lda: 48, ldb: 56, offB: 16 }],
    ["nn f32", { mode: "nn", bDtype: "f32", M: 65, N: 68, K: 36, offA: 8, offB: 4 }],
    ["nt f16", { mode: "nt", bDtype: "f16", M: 17, N: 9, K: 24 }],
    // A transposed: A staged an element a load, B vectorised.
    ["tn f32", { mode: "tn", bDtype: "f32", M: 20, N: 12, K: 50 }],
  ];
  for (const [gname, g] of geometries()) {
    it(`${gname}: scalar and vectorised staging give the CPU's slices`, async () => {
      const { BM, BN } = coopBlock(g);
      expect([BM * g.BK, BN * g.BK]).toEqual([2048, 2048]);
      for (const [i, [name, pr]] of problems.entries()) {
        for (const vec of [false, true]) {
          try {
            await checkStaging(g, pr, vec, 100 + i);
          } catch (e) {
            throw new Error(`${name}, ${vec ? "vec" : "scalar"}: ${(e as Error).message}`, { cause: e });
          }
        }
      }
      // Scalar staging of any shape: odd sizes, K below a slice.
      await checkStaging(g, { mode: "tt", bDtype: "bf16", M: 9, N: 13, K: 7 }, false, 120);
    });
  }

  it("vectorises only where whole vectors fit the layout", () => {
    const l = { N: 64, K: 64, batch: 1, lda: 64, ldb: 64, offA: 0, offB: 0, sA: 0, sB: 0 };
    expect(coopStagingFor("vec", "nt", "bf16", l)).toEqual({ vecA: true, vecB: true });
    expect(coopStagingFor("scalar", "nt", "bf16", l)).toEqual({ vecA: false, vecB: false });
    expect(coopStagingFor("vec", "tn", "bf16", l)).toEqual({ vecA: false, vecB: true });
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, K: 60 })).toEqual({ vecA: true, vecB: false }); // K % 8
    expect(coopStagingFor("vec", "nt", "f32", { ...l, K: 60 })).toEqual({ vecA: true, vecB: true }); // K % 4
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, K: 62, lda: 64, ldb: 64 })).toEqual({
      vecA: false,
      vecB: false,
    });
    expect(coopStagingFor("vec", "nn", "bf16", { ...l, N: 36 })).toEqual({ vecA: true, vecB: false }); // N % 8 (nn)
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, N: 36 })).toEqual({ vecA: true, vecB: true }); // N free (nt)
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, lda: 66 })).toEqual({ vecA: false, vecB: true });
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, offB: 4 })).toEqual({ vecA: true, vecB: false });
    expect(coopStagingFor("vec", "nt", "bf16", { ...l, batch: 2, sA: 6, sB: 64 })).toEqual({ vecA: false, vecB: true });
    expect(coopVectorB(0)).toBe(4);
    expect(coopVectorB(1)).toBe(8);
  });
});
