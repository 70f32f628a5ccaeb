// Kernels bench, the per-row and LoRA kernels: GPU sampling and token logprobs at every threads-per-row count that
// start-up tuning chooses from (8, 64, 256), and the LoRA forward and backward in GFLOP/s.
// Every output is checked against the kernel's CPU reference before it is timed.
import type { Gpu, Recorder } from "@webart/gpu";
import {
  packSampleRows,
  sample,
  type SampleRow,
  logprobsChunk,
  logprobsFinalize,
  logprobsStatsBytes,
  loraBackward,
  loraForward,
  ROW_THREADS,
  rowThreads,
} from "@webart/shaders";
import { sampleReference, logprobsReference, loraReference } from "@webart/shaders/reference";
import { Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { timeGpu, type BenchContext, type BenchResult, type Suite } from "../harness.ts";

/** Every threads-per-row count start-up tuning chooses from. */
const WGS = ROW_THREADS.map(Number);

/** Times `record` in submits of `reps` calls, ms per call. */
async function perCall(gpu: Gpu, record: (r: Recorder) => void, reps: number, quick: boolean): Promise<number> {
  const many = (r: Recorder) => {
    for (let i = 0; i < reps; i++) record(r);
  };
  return (await timeGpu(gpu, many, { minMs: quick ? 20 : 300, maxReps: quick ? 3 : 20 })) / reps;
}

/** One row per threads-per-row count (ms a call), each against 256 threads; `bytes` read per call. */
function wgRows(
  ctx: BenchContext,
  id: string,
  ms: Record<number, number>,
  chosen: number,
  bytes: number,
): BenchResult[] {
  return WGS.map((wg) => ({
    id: `${id}.wg${wg}`,
    value: ms[wg],
    unit: "ms",
    fraction_of_peak: bytes / (ms[wg] * 1e6) / ctx.peak.copy_gbps,
    ...(wg !== 256 ? { vs: { id: `${id}.wg256`, ratio: ms[256] / ms[wg] } } : {}),
    note: `${wg} threads a row${wg === chosen ? ", chosen here" : ""}; fraction of peak: bytes read over copy bandwidth`,
  }));
}

async function sampleBench(ctx: BenchContext, V: number): Promise<BenchResult[]> {
  const { gpu, quick } = ctx;
  const B = 16;
  const rng = new Rng(V);
  const logits = rng.f32(B * V, -6, 6);
  const rows: SampleRow[] = Array.from({ length: B }, (_, b) => ({ temperature: 1, seed: 7, step: b }));
  const [bl, br, bt, bp] = [
    gpu.upload(logits, "bench"),
    gpu.upload(packSampleRows(rows), "bench"),
    gpu.buffer(B * 4, "bench"),
    gpu.buffer(B * 4, "bench"),
  ];
  const ref = sampleReference(logits, B, V, rows);
  // Each row's log-sum-exp in f64, for the logprob of whichever token the GPU drew.
  const lse = Array.from({ length: B }, (_, b) => {
    const row = logits.subarray(b * V, (b + 1) * V);
    const m = row.reduce((a, x) => Math.max(a, x), -Infinity);
    return m + Math.log(row.reduce((a, x) => a + Math.exp(x - m), 0));
  });
  const ms: Record<number, number> = {};
  for (const wg of WGS) {
    const rec = gpu.recorder();
    sample(gpu, rec, { logits: bl, rows: br, tokens: bt, logprobs: bp }, { B, V }, { wg });
    const [tok, lp] = [rec.read(bt, B * 4), rec.read(bp, B * 4)];
    await rec.submit();
    const got = new Uint32Array(await tok);
    // Where the uniform falls within 1e-4 of a CDF step, f32 sums in another order may draw the neighbour (at
    // V = 151936 every step is that close), so only the other rows must match the reference's token.
    const same = [...got].filter((t, b) => t === ref.tokens[b] || ref.margin[b] < 1e-4).length;
    if (same !== B) throw new Error(`sample wg=${wg}: ${B - same} of ${B} tokens differ from the reference`);
    const want = Float64Array.from(got, (t, b) => logits[b * V + t] - lse[b]);
    assertClose(`sample logprobs wg=${wg}`, new Float32Array(await lp), want, { atol: 4e-5, rtol: 1e-5 });
    ms[wg] = await perCall(
      gpu,
      (r) => sample(gpu, r, { logits: bl, rows: br, tokens: bt, logprobs: bp }, { B, V }, { wg }),
      10,
      quick,
    );
  }
  gpu.release(bl, br, bt, bp);
  // Without top-k / top-p the kernel reads the logits three times.
  return wgRows(ctx, `sample.b${B}_v${V}`, ms, rowThreads(gpu, ctx.tuning?.sample), 3 * B * V * 4);
}

async function logprobsBench(ctx: BenchContext): Promise<BenchResult[]> {
  const { gpu, quick } = ctx;
  const [N, V] = quick ? [64, 406] : [1024, 4096];
  const rng = new Rng(5);
  const logits = rng.f32(N * V, -4, 4);
  const targets = Uint32Array.from({ length: N }, () => rng.int(V));
  const [bl, bt, bs, blp, be, bls] = [
    gpu.upload(logits, "bench"),
    gpu.upload(targets, "bench"),
    gpu.buffer(logprobsStatsBytes(N), "bench"),
    gpu.buffer(N * 4, "bench"),
    gpu.buffer(N * 4, "bench"),
    gpu.buffer(N * 4, "bench"),
  ];
  const ref = logprobsReference(logits, targets, N, V);
  const ms: Record<number, number> = {};
  for (const wg of WGS) {
    const rec = gpu.recorder();
    logprobsChunk(gpu, rec, { logits: bl, targets: bt, stats: bs }, { N, v0: 0, cols: V }, { first: true, wg });
    logprobsFinalize(gpu, rec, { stats: bs, logprob: blp, entropy: be, lse: bls }, { N });
    const out = rec.read(blp, N * 4);
    await rec.submit();
    assertClose(`logprobs wg=${wg}`, new Float32Array(await out), ref.logprob, { atol: 1e-4, rtol: 1e-5 });
    ms[wg] = await perCall(
      gpu,
      (r) => logprobsChunk(gpu, r, { logits: bl, targets: bt, stats: bs }, { N, v0: 0, cols: V }, { first: true, wg }),
      4,
      quick,
    );
  }
  gpu.release(bl, bt, bs, blp, be, bls);
  return wgRows(ctx, `logprobs.n${N}_v${V}`, ms, rowThreads(gpu, ctx.tuning?.logprobs), N * V * 4);
}

async function loraBench(ctx: BenchContext): Promise<BenchResult[]> {
  const { gpu, quick, peak } = ctx;
  const d = quick ? { N: 64, in: 96, out: 96, R: 8, scale: 2 } : { N: 1024, in: 896, out: 896, R: 8, scale: 2 };
  const rng = new Rng(9);
  const [x, A, B, dy] = [rng.f32(d.N * d.in), rng.f32(d.R * d.in), rng.f32(d.out * d.R), rng.f32(d.N * d.out)];
  const w = gpu.upload(Float32Array.from([...A, ...B]), "bench");
  const g = gpu.buffer((A.length + B.length) * 4, "bench");
  const slot = { buffer: w, a: 0, b: A.length };
  const gslot = { buffer: g, a: 0, b: A.length };
  const [bx, bt, by, bdy, bdx] = [
    gpu.upload(x, "bench"),
    gpu.buffer(d.N * d.R * 4, "bench"),
    gpu.buffer(d.N * d.out * 4, "bench"),
    gpu.upload(dy, "bench"),
    gpu.buffer(d.N * d.in * 4, "bench"),
  ];
  const rec = gpu.recorder();
  rec.clear(by);
  loraForward(gpu, rec, { slot, x: bx, t: bt, y: by }, d);
  const out = rec.read(by, d.N * d.out * 4);
  await rec.submit();
  assertClose("lora forward", new Float32Array(await out), loraReference(d, x, A, B).y, { atol: 1e-3, rtol: 1e-4 });
  const fwd = await perCall(gpu, (r) => loraForward(gpu, r, { slot, x: bx, t: bt, y: by }, d), 4, quick);
  const bwd = await perCall(
    gpu,
    (r) => loraBackward(gpu, r, { slot, grads: gslot, x: bx, t: bt, dy: bdy, dx: bdx }, d),
    4,
    quick,
  );
  gpu.release(w, g, bx, bt, by, bdy, bdx);
  const fflops = 2 * d.N * d.R * (d.in + d.out);
  const id = `lora.n${d.N}_${d.in}x${d.out}_r${d.R}`;
  return [
    {
      id: `${id}.forward`,
      value: fflops / (fwd * 1e6),
      unit: "GFLOP/s",
      fraction_of_peak: fflops / (fwd * 1e6) / peak.fma_gflops,
      note: `${fwd.toFixed(2)} ms`,
    },
    // dt, dB, dA and dx: four products of the forward's size each
    {
      id: `${id}.backward`,
      value: (2 * fflops) / (bwd * 1e6),
      unit: "GFLOP/s",
      fraction_of_peak: (2 * fflops) / (bwd * 1e6) / peak.fma_gflops,
      note: `${bwd.toFixed(2)} ms`,
    },
  ];
}

export const smallSuite: Suite = async (ctx) => [
  ...(await sampleBench(ctx, 406)),
  ...(ctx.quick ? [] : await sampleBench(ctx, 151_936)),
  ...(await logprobsBench(ctx)),
  ...(await loraBench(ctx)),
];

export default smallSuite;
