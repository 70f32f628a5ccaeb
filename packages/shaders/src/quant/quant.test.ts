// q4 weights: the CPU quantizer's error bound and exactness in f16, the GPU's f16 copy against the CPU's values, and
// the GPU quantizer against the CPU's, bit for bit.
import { beforeAll, expect, it } from "vitest";
import { fromBf16, fromF16, getDevice, roundHalf, Rng, toBf16, toF16, type Gpu } from "@webart/gpu";
import {
  Q4_GROUP,
  Q4_MIN_SCALE,
  dequantizeQ4,
  q4Bytes,
  q4Dequant,
  q4ErrorsInit,
  q4Gather,
  q4Quantize,
  q4QuantizeError,
  quantizeQ4,
} from "./index.ts";

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

/** Values that try the GPU quantizer's every comparison: each group's max exactly 7 times a bf16 scale and an f32
 *  step either side, elements exactly on a rounding threshold ((k - 8.5)·s) and a step either side, subnormals,
 *  -0 and 0, a group of tiny weights (the least scale), the largest magnitude q4 takes (7 · 4096), ordinary ones. */
function hardWeights(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const w = rng.f32(n);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const step = (x: number, d: number) => ((f[0] = x), (u[0] += x === 0 ? 0 : Math.sign(x) * d), f[0]); // f32 ulps
  for (let g = 0; g * Q4_GROUP < n; g++) {
    const e0 = g * Q4_GROUP;
    const e1 = Math.min(n, e0 + Q4_GROUP);
    const s = fromBf16(toBf16(0.001 + 0.05 * Math.abs(w[e0]))); // a bf16 scale
    for (let e = e0; e < e1; e++) w[e] = (w[e] - 0.5) * 12 * s; // within ±6 s
    const kind = g % 8;
    if (kind === 0 || kind === 1 || kind === 2) w[e0] = step(7 * s, kind - 1); // the max on 7·s, a step off
    if (kind === 3) {
      // The scale is s (the max is 7·s); the others on the thresholds ±0.5·s .. ±6.5·s, and an f32 step either side.
      for (let e = e0 + 1; e < e1; e++) w[e] = step((((e - e0) % 14) - 7 + 0.5) * s, ((e - e0) % 3) - 1);
      w[e0] = 7 * s;
    }
    if (kind === 4) for (let e = e0; e < e1; e++) w[e] = ((e - e0) % 3 === 0 ? 1e-40 : -3e-39) * (e - e0 + 1); // subnormal
    if (kind === 5) for (let e = e0; e < e1; e++) w[e] *= 1e-4; // below the least scale's step
    if (kind === 6) w[e0] = (g / 8) % 2 ? -28672 : 28672; // 7 · Q4_MAX_SCALE
    if (kind === 7) {
      w[e0] = -0; // signed zeros
      if (e0 + 1 < e1) w[e0 + 1] = 0;
    }
  }
  return w;
}

/** A tensor's bytes in dtype (padded to whole u32s), and the f32 values they hold. */
function asDtype(w: Float32Array, dtype: "f32" | "bf16" | "f16"): { bytes: Uint32Array; values: Float32Array } {
  if (dtype === "f32") return { bytes: new Uint32Array(w.buffer.slice(0)), values: w };
  const h = new Uint16Array(Math.ceil(w.length / 2) * 2);
  for (let i = 0; i < w.length; i++) h[i] = dtype === "bf16" ? toBf16(w[i]) : toF16(w[i]);
  const values = Float32Array.from(h.subarray(0, w.length), dtype === "bf16" ? fromBf16 : fromF16);
  return { bytes: new Uint32Array(h.buffer), values };
}

const SENTINEL = 0xdeadbeef;

/** q4Quantize of `src` into nibbles and scales buffers filled with SENTINEL, at outFirst; the words read back. */
async function quantizeOnGpu(
  src: Uint32Array,
  o: { n: number; dtype: "f32" | "bf16" | "f16"; outFirst: number; base?: number; slot?: number; slots?: number },
) {
  const need = q4Bytes(o.outFirst + o.n + 64);
  const [s, q, sc, err] = [
    gpu.upload(src),
    gpu.upload(new Uint32Array(need.nibbles / 4).fill(SENTINEL)),
    gpu.upload(new Uint32Array(need.scales / 4).fill(SENTINEL)),
    gpu.upload(q4ErrorsInit(o.slots ?? 1)),
  ];
  const rec = gpu.recorder();
  q4Quantize(gpu, rec, { src: s, nibbles: q, scales: sc, errors: err }, o);
  const reads = [rec.read(q, need.nibbles), rec.read(sc, need.scales), rec.read(err, 8 * (o.slots ?? 1))];
  await rec.submit();
  const [nibbles, scales, errors] = (await Promise.all(reads)).map((b) => new Uint32Array(b));
  gpu.release(s, q, sc, err);
  return { nibbles, scales, errors };
}

it.each([
  ["f32", 4096, 0],
  ["f32", 1000, 512], // a tail pair with one partial group, at an offset as in a group's buffer
  ["bf16", 4099, 0],
  ["bf16", 2019, 1024],
  ["f16", 3001, 64],
] as const)("q4_quantize of %s weights (n=%i at element %i) gives quantizeQ4's bits", async (dtype, n, outFirst) => {
  const { bytes, values } = asDtype(hardWeights(n, n + outFirst), dtype);
  const want = quantizeQ4(values);
  const got = await quantizeOnGpu(bytes, { n, dtype, outFirst });
  const [w0, s0] = [outFirst / 8, outFirst / 64];
  expect(Array.from(got.nibbles.subarray(w0, w0 + want.nibbles.length))).toEqual(Array.from(want.nibbles));
  expect(Array.from(got.scales.subarray(s0, s0 + want.scales.length))).toEqual(Array.from(want.scales));
  // Nothing written outside the tensor's words, and no error.
  for (const [a, from, to] of [
    [got.nibbles, w0, w0 + want.nibbles.length],
    [got.scales, s0, s0 + want.scales.length],
  ] as const) {
    expect([...a.subarray(0, from)].every((x) => x === SENTINEL)).toBe(true);
    expect([...a.subarray(to)].every((x) => x === SENTINEL)).toBe(true);
  }
  expect(Array.from(got.errors)).toEqual([0xffffffff, 0xffffffff]);
  expect(gpu.errors).toEqual([]);
});

it.each(["f32", "bf16", "f16"] as const)(
  "q4_quantize reports a %s tensor's first non-finite element and first group past q4's range, as quantizeQ4",
  async (dtype) => {
    const n = 640;
    const w = hardWeights(n, 3);
    w[300] = dtype === "f16" ? 60000 : 1e6; // a group past Q4_MAX_SCALE (f16's largest is 65504)
    w[450] = NaN;
    w[460] = -Infinity;
    const { bytes } = asDtype(w, dtype);
    const base = 1 << 20; // the chunk's first element in its tensor
    const got = await quantizeOnGpu(bytes, { n, dtype, outFirst: 0, base, slot: 2, slots: 4 });
    expect(Array.from(got.errors)).toEqual([
      ...[0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
      ...[base + 450, base + 288],
      ...[0xffffffff, 0xffffffff],
    ]);
    const why = q4QuantizeError(got.errors, 2, "model.layers.3.mlp.down_proj.weight");
    expect(why).toMatch(/^q4: model\.layers\.3\.mlp\.down_proj\.weight has a weight of magnitude over 28672/);
    expect(q4QuantizeError(got.errors, 1, "x")).toBeNull();
    // quantizeQ4 stops at the same group.
    expect(() => quantizeQ4(asDtype(w, dtype).values, "W")).toThrow(/element 288\.\.319/);
    const nan = await quantizeOnGpu(
      asDtype(
        w.map((x, i) => (i === 300 ? 0 : x)),
        dtype,
      ).bytes,
      { n, dtype, outFirst: 0 },
    );
    expect(q4QuantizeError(nan.errors, 0, "W")).toBe(
      "q4: W element 450 is not finite (NaN or Infinity); only finite weights can be quantized",
    );
    expect(gpu.errors).toEqual([]);
  },
);

it("q4Quantize checks its offsets and buffers before dispatching", () => {
  const b = gpu.buffer(1024);
  const rec = gpu.recorder();
  const bufs = { src: b, nibbles: b, scales: b, errors: b };
  expect(() => q4Quantize(gpu, rec, bufs, { n: 64, dtype: "bf16", outFirst: 32 })).toThrow(/multiple of 64/);
  expect(() => q4Quantize(gpu, rec, bufs, { n: 4096, dtype: "f32" })).toThrow(/src needs 16384 bytes but its/);
  expect(() => q4Quantize(gpu, rec, bufs, { n: 64, dtype: "bf16", slot: 200 })).toThrow(/errors needs 1608 bytes/);
  rec.abandon();
  gpu.release(b);
});
