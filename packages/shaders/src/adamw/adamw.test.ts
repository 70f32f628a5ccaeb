import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { adamwPartsBytes, adamwStatsBytes, adamwStep, scaleGrads, type AdamWConfig } from "./index.ts";
import { adamwReference, type AdamWState } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

const base: Omit<AdamWConfig, "maxNorm"> = { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 };

/** Runs `steps` GPU steps against the reference; grads are drawn fresh each step (std ~0.05). */
async function compare(n: number, maxNorm: number, steps: number, seed: number): Promise<number[]> {
  const rng = new Rng(seed);
  let ref: AdamWState = { weights: rng.f32(n), m: new Float32Array(n), v: new Float32Array(n) };
  const b = {
    weights: gpu.upload(ref.weights),
    grads: gpu.buffer(n * 4),
    m: gpu.upload(ref.m),
    v: gpu.upload(ref.v),
    parts: gpu.buffer(adamwPartsBytes),
    stats: gpu.buffer(adamwStatsBytes),
  };
  const c = { ...base, maxNorm };
  const clips: number[] = [];
  for (let step = 1; step <= steps; step++) {
    const grads = rng.f32(n, -0.1, 0.1);
    gpu.write(b.grads, grads);
    const rec = gpu.recorder();
    adamwStep(gpu, rec, b, { n, step }, c);
    const reads = [b.weights, b.m, b.v].map((x) => rec.read(x, n * 4));
    const st = rec.read(b.stats, 16);
    await rec.submit();
    const [w, m, v] = (await Promise.all(reads)).map((x) => new Float32Array(x));
    const stats = new Float32Array(await st);
    const next = adamwReference(ref, grads, c, step);
    assertClose(`norm (step ${step})`, [stats[0]], [next.norm], { atol: 0, rtol: 1e-5 });
    assertClose(`clip (step ${step})`, [stats[1]], [next.clip], { atol: 0, rtol: 1e-5 });
    expect(stats[2]).toBe(1);
    // f32 vs f64 per step; each stored back as f32 and carried on.
    assertClose(`m (step ${step})`, m, next.m, { atol: 1e-8, rtol: 1e-5 });
    assertClose(`v (step ${step})`, v, next.v, { atol: 1e-10, rtol: 1e-5 });
    assertClose(`weights (step ${step})`, w, next.weights, { atol: 2e-7, rtol: 1e-5 });
    clips.push(next.clip);
    ref = next;
  }
  gpu.release(...Object.values(b));
  expect(gpu.errors).toEqual([]);
  return clips;
}

it.each([1000, 70_001])("AdamW with clipping active matches the reference over 4 steps, n=%i", async (n) => {
  const norm = 0.1 * Math.sqrt(n / 3); // expected grad norm for uniform(-0.1, 0.1)
  const clips = await compare(n, 0.25 * norm, 4, n);
  for (const c of clips) expect(c).toBeLessThan(0.3);
});

it.each([
  [1000, 0],
  [70_001, 1e6],
])("AdamW with clipping inactive matches the reference over 4 steps, n=%i maxNorm=%f", async (n, maxNorm) => {
  const clips = await compare(n, maxNorm, 4, n + 1);
  expect(clips).toEqual([1, 1, 1, 1]);
});

it("a non-finite grad norm skips the step and says so", async () => {
  const n = 300;
  const rng = new Rng(5);
  const [w0, m0, v0] = [rng.f32(n), rng.f32(n, 0, 0.01), rng.f32(n, 0, 0.01)];
  for (const bad of [Infinity, NaN]) {
    const grads = rng.f32(n);
    grads[123] = bad;
    const b = {
      weights: gpu.upload(w0),
      grads: gpu.upload(grads),
      m: gpu.upload(m0),
      v: gpu.upload(v0),
      parts: gpu.buffer(adamwPartsBytes),
      stats: gpu.buffer(adamwStatsBytes),
    };
    const rec = gpu.recorder();
    adamwStep(gpu, rec, b, { n, step: 3 }, { ...base, maxNorm: 1 });
    const reads = [b.weights, b.m, b.v].map((x) => rec.read(x, n * 4));
    const st = rec.read(b.stats, 16);
    await rec.submit();
    const [w, m, v] = (await Promise.all(reads)).map((x) => new Float32Array(x));
    expect(new Float32Array(await st)[2]).toBe(0);
    expect(w).toEqual(w0);
    expect(m).toEqual(m0);
    expect(v).toEqual(v0);
    gpu.release(...Object.values(b));
  }
  expect(gpu.errors).toEqual([]);
});

it.each([0.25, 0])("scaleGrads multiplies by %f (0 clears NaN too)", async (scale) => {
  const n = 517;
  const g = new Rng(9).f32(n);
  g[7] = NaN;
  const bg = gpu.upload(g);
  const rec = gpu.recorder();
  scaleGrads(gpu, rec, { grads: bg }, { n, scale });
  const out = rec.read(bg, n * 4);
  await rec.submit();
  const expected = g.map((x) => (scale === 0 ? 0 : x * scale));
  expect(new Float32Array(await out)).toEqual(expected);
  gpu.release(bg);
});
