// The decode matvec against the CPU reference: f32 and 16-bit W, odd sizes, M from 1 to 64,
// odd element offsets (shards starting mid-word), strided x and y, bias, and the argument checks.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng, packHalf, roundHalf } from "@webart/gpu";
import { assertClose, type Tolerance } from "@webart/gpu/check";
import { MATVEC_VARIANTS, matvec, matvecVariants, type MatvecOptions } from "./index.ts";
import { matvecReference } from "./reference.ts";

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
];

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));
afterAll(() => expect(gpu.errors).toEqual([]));

async function check(g: Gpu, o: MatvecOptions, seed: number, bias = false) {
  const rng = new Rng(seed);
  const { M, N, K, wDtype = "f32" } = o;
  const [ldx, ldy] = [o.ldx ?? K, o.ldy ?? N];
  const xVals = rng.f32((o.offsetX ?? 0) + M * ldx + 2);
  const wVals = rng.f32((o.offsetW ?? 0) + N * K + 1);
  const yInit = rng.f32((o.offsetY ?? 0) + M * ldy + 2);
  const biasVals = rng.f32((o.offsetBias ?? 0) + N);
  const [bx, bw, by] = [g.upload(xVals), g.upload(wDtype === "f32" ? wVals : packHalf(wVals, wDtype)), g.upload(yInit)];
  const bb = bias ? g.upload(biasVals) : undefined;
  const rec = g.recorder();
  matvec(g, rec, bx, bw, by, { ...o, bias: bb });
  const out = rec.read(by, yInit.byteLength);
  await rec.submit();
  const got = new Float32Array(await out);
  g.release(bx, bw, by, bb);
  const wRef = wDtype === "f32" ? wVals : roundHalf(wVals, wDtype);
  const want = matvecReference(xVals, wRef, yInit.slice(), o, bias ? biasVals : undefined, o.offsetBias);
  assertClose(`matvec ${wDtype} ${M}x${N}x${K}`, got, want, TOL);
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
  expect(() => matvec(gpu, rec, x, w, y, { M: 1, N: 3, K: 8 })).toThrow(/W needs 96 bytes/);
  expect(() => matvec(gpu, rec, x, w, y, { M: 2, N: 2, K: 8, offsetX: 1 })).toThrow(/x needs/);
  expect(() => matvec(gpu, rec, x, w, y, { M: 1, N: 4, K: 8, wDtype: "bf16", offsetW: 1 })).toThrow(/W needs 68 bytes/);
  matvec(gpu, rec, x, w, y, { M: 1, N: 4, K: 8, wDtype: "bf16" }); // 32 halves fit in 16 words
  expect(rec.dispatches).toBe(1);
  await rec.submit();
  gpu.release(x, w, y);
});

it("gives the same results with Dawn's robustness on (as in browsers)", async () => {
  const robust = await getDevice({ robustness: true });
  for (const variant of matvecVariants(robust)) {
    await check(robust, { M: 5, N: 33, K: 17, wDtype: "bf16", offsetW: 3, variant }, 120, true);
  }
  expect(robust.errors).toEqual([]);
});
