// q4 weights: the CPU quantizer's error bound and exactness in f16, and the GPU's f16 copy against the CPU's values.
import { beforeAll, expect, it } from "vitest";
import { fromF16, getDevice, roundHalf, Rng, type Gpu } from "@webart/gpu";
import { Q4_GROUP, Q4_MIN_SCALE, dequantizeQ4, q4Bytes, q4Dequant, q4Gather, quantizeQ4 } from "./index.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

/** Weights of mixed magnitudes: groups of ordinary ones, a group of tiny ones, an outlier, exact zeros. */
function weights(n: number, seed: number): Float32Array {
  const w = new Rng(seed).f32(n);
  for (let i = 0; i < n; i++) w[i] *= 0.05;
  for (let i = Q4_GROUP; i < Math.min(n, 2 * Q4_GROUP); i++) w[i] *= 1e-4; // below the least scale's step
  if (n > 100) w[100] = 3.5;
  for (let i = 2 * Q4_GROUP; i < Math.min(n, 2 * Q4_GROUP + 5); i++) w[i] = 0;
  return w;
}

it.each([32, 1000, 4099])(
  "quantizes %i weights within half a step of each group, exactly representable in f16",
  (n) => {
    const w = weights(n, n);
    const { nibbles, scales } = quantizeQ4(w);
    expect(nibbles.byteLength).toBe(q4Bytes(n).nibbles);
    expect(scales.byteLength).toBe(q4Bytes(n).scales);
    const d = dequantizeQ4(nibbles, scales, n);
    expect(Array.from(roundHalf(d, "f16"))).toEqual(Array.from(d)); // q·s is exact in f16
    for (let g = 0; g * Q4_GROUP < n; g++) {
      const part = Array.from(w.subarray(g * Q4_GROUP, (g + 1) * Q4_GROUP));
      const max = Math.max(...part.map(Math.abs));
      const step = Math.max(max / 7, Q4_MIN_SCALE) * (1 + 2 ** -7); // the scale, rounded up to bf16
      part.forEach((v, i) => expect(Math.abs(d[g * Q4_GROUP + i] - v)).toBeLessThanOrEqual(step / 2 + 1e-12));
    }
    for (let i = 2 * Q4_GROUP; i < Math.min(n, 2 * Q4_GROUP + 5); i++) expect(d[i]).toBe(0);
    expect(dequantizeQ4(nibbles, scales, n - 8, 8)).toEqual(d.subarray(8));
  },
);

it("refuses a weight that is not finite or too large, naming the tensor and the element", () => {
  const w = new Float32Array(64);
  w[40] = NaN;
  expect(() => quantizeQ4(w, "model.layers.0.mlp.up_proj.weight")).toThrow(
    /model\.layers\.0\.mlp\.up_proj\.weight element 40 is NaN/,
  );
  w[40] = 1e6;
  expect(() => quantizeQ4(w, "W")).toThrow(/W has a weight of magnitude 1000000 \(element 32\.\.63\)/);
});

it.each([
  [1024, 0],
  [4099, 0],
  [3000, 512],
])("q4_dequant writes the CPU's values in f16 (n=%i from element %i)", async (n, first) => {
  const w = weights(first + n, 7);
  const { nibbles, scales } = quantizeQ4(w);
  const [q, s] = [gpu.upload(nibbles), gpu.upload(scales)];
  const out = gpu.buffer(Math.ceil(n / 8) * 16);
  const rec = gpu.recorder();
  q4Dequant(gpu, rec, { q, s, out }, { n, first });
  const read = rec.read(out, Math.ceil(n / 8) * 16);
  await rec.submit();
  const halves = new Uint16Array(await read);
  const want = dequantizeQ4(nibbles, scales, n, first);
  const got = Array.from(halves.subarray(0, n), fromF16);
  expect(got).toEqual(Array.from(want));
  const bad = gpu.recorder();
  expect(() => q4Dequant(gpu, bad, { q, s, out }, { n, first: 4 })).toThrow(/multiple of 8/);
  expect(() => q4Dequant(gpu, bad, { q, s, out }, { n: n + 2 ** 20, first })).toThrow(/needs \d+ bytes but its/);
  bad.abandon();
  gpu.release(q, s, out);
  expect(gpu.errors).toEqual([]);
});

it.each([
  [5, 64, 1],
  [40, 96, Math.sqrt(1152)], // Gemma scales its embedding by sqrt(hidden)
])("q4_gather reads %i rows of a (V, %i) q4 table as the CPU's values times the scale", async (N, C, scale) => {
  const V = 37;
  const w = weights(V * C, 11);
  const { nibbles, scales } = quantizeQ4(w);
  const table = dequantizeQ4(nibbles, scales, V * C);
  const rng = new Rng(N);
  const idList = Array.from({ length: N }, () => rng.int(V));
  const [q, s, ids, out] = [
    gpu.upload(nibbles),
    gpu.upload(scales),
    gpu.upload(Uint32Array.from(idList)),
    gpu.buffer(N * C * 4),
  ];
  const rec = gpu.recorder();
  q4Gather(gpu, rec, { ids, q, s, out }, { N, C, V, scale });
  const read = rec.read(out, N * C * 4);
  await rec.submit();
  const got = new Float32Array(await read);
  const want = new Float32Array(N * C);
  idList.forEach((id, n) => {
    for (let c = 0; c < C; c++) want[n * C + c] = Math.fround(table[id * C + c] * Math.fround(scale));
  });
  expect(Array.from(got)).toEqual(Array.from(want));
  const bad = gpu.recorder();
  expect(() => q4Gather(gpu, bad, { ids, q, s, out }, { N, C: 48, V, scale })).toThrow(/multiple of 32/);
  bad.abandon();
  gpu.release(q, s, ids, out);
  expect(gpu.errors).toEqual([]);
});
