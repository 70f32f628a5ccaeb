import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import {
  packAllowedMask,
  packSampleRows,
  sample,
  SAMPLE_NONE,
  sampleSplit,
  SPLIT_ROWS,
  type SampleRow,
} from "./index.ts";
import { sampleReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// Workgroup 256 (the default) runs in the reference test; the others use 64 or 32, which SwiftShader
// runs several times faster.

interface Run {
  tokens: Uint32Array;
  logprobs: Float32Array;
}

async function run(
  logits: Float32Array,
  B: number,
  V: number,
  rows: SampleRow[],
  mask?: Uint32Array,
  logprobAtTemperature = false,
  wg?: number,
  split?: number,
): Promise<Run> {
  const bl = gpu.upload(logits);
  const br = gpu.upload(packSampleRows(rows));
  const bm = mask ? gpu.upload(mask) : undefined;
  const [bt, bp] = [gpu.buffer(B * 4), gpu.buffer(B * 4)];
  const rec = gpu.recorder();
  sample(
    gpu,
    rec,
    { logits: bl, rows: br, tokens: bt, logprobs: bp, mask: bm },
    { B, V },
    { logprobAtTemperature, wg, split },
  );
  const t = rec.read(bt, B * 4);
  const p = rec.read(bp, B * 4);
  await rec.submit();
  gpu.release(bl, br, bm, bt, bp);
  expect(gpu.errors).toEqual([]);
  return { tokens: new Uint32Array(await t), logprobs: new Float32Array(await p) };
}

function argmax(logits: Float32Array, b: number, V: number, ok: (j: number) => boolean = () => true): number {
  let best = -1;
  for (let j = 0; j < V; j++) if (ok(j) && (best < 0 || logits[b * V + j] > logits[b * V + best])) best = j;
  return best;
}

function randomMask(rng: Rng, B: number, V: number, density: number): { mask: Uint32Array; ids: number[][] } {
  const ids = Array.from({ length: B }, () => [...Array(V).keys()].filter(() => rng.next() < density));
  return { mask: packAllowedMask(V, ids), ids };
}

it("greedy (T = 0) and top-k = 1 give the argmax, with and without a mask", async () => {
  const [B, V] = [6, 1003];
  const rng = new Rng(1);
  const logits = rng.f32(B * V, -5, 5);
  const { mask, ids } = randomMask(rng, B, V, 0.3);
  const greedy = Array.from({ length: B }, (_, b) => ({ temperature: 0, seed: b, step: 0 }));
  const topk1 = Array.from({ length: B }, (_, b) => ({ temperature: 1.3, topK: 1, topP: 0.9, seed: b, step: 7 }));
  for (const rows of [greedy, topk1]) {
    const plain = await run(logits, B, V, rows, undefined, false, 64);
    const masked = await run(logits, B, V, rows, mask, false, 64);
    for (let b = 0; b < B; b++) {
      expect(plain.tokens[b]).toBe(argmax(logits, b, V));
      const allowed = new Set(ids[b]);
      expect(masked.tokens[b]).toBe(argmax(logits, b, V, (j) => allowed.has(j)));
    }
    // The logprob is the unmasked temperature-1 log-softmax in both cases.
    const ref = sampleReference(logits, B, V, rows, mask);
    assertClose("greedy logprob", masked.logprobs, ref.logprobs, { atol: 2e-5, rtol: 1e-5 });
  }
});

it("matches the CPU reference across temperature, top-k, top-p, masks, workgroup sizes (V = 777, 151936)", async () => {
  for (const [B, V] of [
    [12, 777],
    [2, 151_936],
  ]) {
    const rng = new Rng(V);
    const logits = rng.f32(B * V, -6, 6);
    const rows: SampleRow[] = Array.from({ length: B }, (_, b) => ({
      temperature: [0.7, 1, 1.5][b % 3],
      topK: [0, 20, 300, 1][b % 4],
      topP: [1, 0.9, 0.5][b % 3],
      seed: 1000 + b,
      step: 3 * b,
    }));
    const { mask } = randomMask(rng, B, V, 0.8);
    // Workgroup sizes: 256 (GPUs' default), 64 and 8 (CPU implementations' default: 19k terms a thread at V=151936).
    for (const [m, atT, wg] of [
      [undefined, false, 256],
      [mask, true, 64],
      [mask, false, 8],
    ] as const) {
      const gpuRun = await run(logits, B, V, rows, m, atT, wg);
      const ref = sampleReference(logits, B, V, rows, m, atT);
      let compared = 0;
      for (let b = 0; b < B; b++) {
        if (ref.margin[b] < 1e-4) continue; // u too close to a CDF step: f32 rounding may pick the neighbour
        compared++;
        expect(gpuRun.tokens[b], `row ${b}`).toBe(ref.tokens[b]);
      }
      expect(compared).toBeGreaterThanOrEqual(B - 1);
      // Logprob of the GPU's own token under the reference softmax.
      const lp = ref.logprobs.map((_, b) =>
        gpuRun.tokens[b] === ref.tokens[b] ? ref.logprobs[b] : gpuRun.logprobs[b],
      );
      assertClose(`logprob V=${V} wg=${wg}`, gpuRun.logprobs, lp, { atol: 4e-5, rtol: 1e-5 });
    }
  }
});

it("split rows (chunks, then a pick) match the CPU reference: temperature, greedy, masks (V = 777, 151936)", async () => {
  for (const [B, V, split] of [
    [12, 777, 5],
    [3, 777, 64],
    [4, 151_936, 48],
  ]) {
    const rng = new Rng(V + split);
    const logits = rng.f32(B * V, -6, 6);
    // A few likely tokens per row, so draws land away from CDF steps often enough to compare exactly.
    for (let b = 0; b < B; b++) for (let i = 0; i < 10; i++) logits[b * V + rng.int(V)] += 12;
    const rows: SampleRow[] = Array.from({ length: B }, (_, b) => ({
      temperature: [0.7, 1, 1.5, 0][b % 4],
      seed: 2000 + b,
      step: 5 * b,
    }));
    const { mask } = randomMask(rng, B, V, 0.8);
    for (const [m, atT] of [
      [undefined, false],
      [mask, true],
    ] as const) {
      const got = await run(logits, B, V, rows, m, atT, 64, split);
      const one = await run(logits, B, V, rows, m, atT, 64); // one workgroup a row
      const ref = sampleReference(logits, B, V, rows, m, atT);
      let compared = 0;
      const sampled = rows.filter((r) => r.temperature > 0).length;
      for (let b = 0; b < B; b++) {
        const greedy = !(rows[b].temperature > 0); // the argmax: exact
        if (!greedy && ref.margin[b] < 1e-4) continue; // u too close to a CDF step: rounding may pick the neighbour
        if (!greedy) compared++;
        expect(got.tokens[b], `row ${b} split ${split}`).toBe(ref.tokens[b]);
        expect(got.tokens[b]).toBe(one.tokens[b]);
      }
      expect(compared).toBeGreaterThanOrEqual(sampled / 2); // ~10% of rows land within 1e-4 of a step at V = 777
      const lp = ref.logprobs.map((_, b) => (got.tokens[b] === ref.tokens[b] ? ref.logprobs[b] : got.logprobs[b]));
      assertClose(`split logprob V=${V}`, got.logprobs, lp, { atol: 4e-5, rtol: 1e-5 });
    }
  }
});

it("split rows: a row with nothing allowed gets no token, and draws follow the distribution (chi-square)", async () => {
  const V = 12;
  const N = 1000;
  const base = Float32Array.from({ length: V }, (_, j) => 2 - 0.35 * j + 0.1 * Math.sin(7 * j));
  const logits = new Float32Array(N * V);
  for (let b = 0; b < N; b++) logits.set(base, b * V);
  const rows = Array.from({ length: N }, (_, b) => ({ temperature: 0.9, seed: 77, step: b, stream: 0 }));
  const ids = Array.from({ length: N }, (_, b) => (b === N - 1 ? [] : [...Array(V).keys()].filter((j) => j !== 3)));
  const got = await run(logits, N, V, rows, packAllowedMask(V, ids), false, 32, 4); // 4 chunks of 3 tokens
  expect(got.tokens[N - 1]).toBe(SAMPLE_NONE);
  expect(got.logprobs[N - 1]).toBe(-Infinity);
  const q = sampleReference(base, 1, V, [rows[0]], packAllowedMask(V, [ids[0]])).probs[0];
  const counts = new Float64Array(V);
  for (const t of got.tokens.subarray(0, N - 1)) counts[t]++;
  expect(counts[3]).toBe(0); // masked
  let chi2 = 0;
  for (let j = 0; j < V; j++) if (q[j] > 0) chi2 += (counts[j] - (N - 1) * q[j]) ** 2 / ((N - 1) * q[j]);
  expect(chi2).toBeLessThan(chi2Quantile(V - 2, 3.09)); // p = 0.001
});

it("a step splits its rows only as tuned, for few rows without top-k or top-p", () => {
  const t = { threads: 256, split: 32 };
  expect(sampleSplit(t, 1, true)).toBe(32);
  expect(sampleSplit(t, SPLIT_ROWS - 1, true)).toBe(32);
  expect(sampleSplit(t, SPLIT_ROWS, true)).toBe(1); // enough rows to spread already
  expect(sampleSplit(t, 1, false)).toBe(1); // top-k / top-p: the threshold search walks the whole row
  expect(sampleSplit({ threads: 8 }, 1, true)).toBe(1); // untuned (CPU devices)
});

it("refuses a split past the workgroup", () => {
  const [l, r, t, lp] = [gpu.buffer(400), gpu.buffer(64), gpu.buffer(16), gpu.buffer(16)];
  const rec = gpu.recorder();
  expect(() =>
    sample(gpu, rec, { logits: l, rows: r, tokens: t, logprobs: lp }, { B: 1, V: 100 }, { wg: 32, split: 33 }),
  ).toThrow(/split 33 must be an integer from 1 to the workgroup size 32/);
  rec.abandon();
  gpu.release(l, r, t, lp);
});

it("replays with the same seed, differs with another seed, never samples masked tokens", async () => {
  const [B, V] = [32, 500];
  const rng = new Rng(3);
  const logits = rng.f32(B * V, -0.5, 0.5); // nearly flat: many tokens are likely
  const rows = (seed: number): SampleRow[] =>
    Array.from({ length: B }, (_, b) => ({ temperature: 1, topP: 0.95, seed, step: 5, stream: b }));
  const a = await run(logits, B, V, rows(42), undefined, false, 64);
  const again = await run(logits, B, V, rows(42), undefined, false, 64);
  const other = await run(logits, B, V, rows(43), undefined, false, 64);
  expect(again.tokens).toEqual(a.tokens);
  const same = a.tokens.filter((t, b) => t === other.tokens[b]).length;
  expect(same).toBeLessThanOrEqual(3); // ~1/400 chance each under a near-uniform distribution

  const { ids } = randomMask(rng, B, V, 0.05);
  ids[B - 1] = []; // a row with nothing allowed
  const masked = await run(logits, B, V, rows(7), packAllowedMask(V, ids), false, 64);
  for (let b = 0; b < B - 1; b++) expect(ids[b]).toContain(masked.tokens[b]);
  expect(masked.tokens[B - 1]).toBe(SAMPLE_NONE);
  expect(masked.logprobs[B - 1]).toBe(-Infinity);
});

// Wilson–Hilferty approximation of the chi-square quantile with df degrees of freedom at z sigmas.
const chi2Quantile = (df: number, z: number) => df * (1 - 2 / (9 * df) + z * Math.sqrt(2 / (9 * df))) ** 3;

it("2000 draws follow the top-k / top-p filtered distribution (chi-square)", async () => {
  const V = 12;
  const N = 2000;
  const base = Float32Array.from({ length: V }, (_, j) => 2 - 0.35 * j + 0.1 * Math.sin(7 * j)); // (V,)
  const logits = new Float32Array(N * V);
  for (let b = 0; b < N; b++) logits.set(base, b * V);
  for (const filt of [
    { temperature: 0.9, topP: 0.8 },
    { temperature: 1.2, topK: 6, topP: 0.9 },
  ]) {
    const rows = Array.from({ length: N }, (_, b) => ({ ...filt, seed: 99, step: b, stream: 0 }));
    const got = await run(logits, N, V, rows, undefined, false, 32); // workgroup 32: 4000 rows on SwiftShader
    const q = sampleReference(base, 1, V, [rows[0]]).probs[0];
    const counts = new Float64Array(V);
    for (const t of got.tokens) counts[t]++;
    let chi2 = 0;
    let df = -1;
    for (let j = 0; j < V; j++) {
      if (q[j] === 0) {
        expect(counts[j], `token ${j} is filtered out`).toBe(0);
        continue;
      }
      chi2 += (counts[j] - N * q[j]) ** 2 / (N * q[j]);
      df++;
    }
    expect(df).toBeGreaterThanOrEqual(3); // the filter kept several tokens and dropped others
    expect(df).toBeLessThan(V - 1);
    expect(chi2).toBeLessThan(chi2Quantile(df, 3.09)); // p = 0.001
  }
});
