// AdamW over one flat f32 buffer of n parameters (all LoRA tensors), with the global grad norm and
// its clip factor computed on the GPU, so a training step records everything with no readback; the
// stats buffer (norm, clip factor, finite flag, sum of squares) can be read later for metrics.
// A non-finite grad norm skips the update (weights and moments untouched; stats[2] = 0 says so).
import { Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./step.wgsl";

const WG = 256;
/** Workgroups of the first reduction stage (so the partials buffer holds this many f32). */
export const ADAMW_PARTS = 256;
export const adamwPartsBytes = ADAMW_PARTS * 4;
export const adamwStatsBytes = 16;

const spec = (name: string): KernelSpec => ({ name, code, overrides: { WG } });
export const adamwSumsq = spec("adamw_sumsq");
export const adamwNorm = spec("adamw_norm");
export const adamwForward = spec("adamw_forward");
export const adamwScale = spec("adamw_scale");

export interface AdamWConfig {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  /** Decoupled: w *= 1 - lr * weightDecay before the Adam step. */
  weightDecay: number;
  /** Clip the global grad norm to this; <= 0: no clipping (the norm is still measured). */
  maxNorm: number;
}

/** A buffer, or a window of one (e.g. one tensor's slice of a flat gradient buffer; offsets 256-aligned). */
type Buf = GPUBuffer | { buffer: GPUBuffer; offset?: number; size?: number };

function need(buf: Buf, bytes: number, what: string): void {
  const size = "buffer" in buf ? (buf.size ?? buf.buffer.size - (buf.offset ?? 0)) : buf.size;
  if (size < bytes) throw new RangeError(`${what}: buffer has ${size} bytes, needs ${bytes}`);
}

function params(n: number, parts: number, c?: AdamWConfig, step = 1, scale = 1): Params {
  const bc1 = c ? 1 - c.beta1 ** step : 1;
  const bc2 = c ? 1 - c.beta2 ** step : 1;
  return new Params()
    .u32(n, parts)
    .f32(c?.lr ?? 0, c?.beta1 ?? 0, c?.beta2 ?? 0, c?.eps ?? 0, c?.weightDecay ?? 0, bc1, bc2, c?.maxNorm ?? 0, scale);
}

export interface GradNormBuffers {
  grads: GPUBuffer; // (n,)
  parts: GPUBuffer; // adamwPartsBytes of scratch
  stats: GPUBuffer; // adamwStatsBytes out
}

/** Records the global grad norm of n grads into stats (norm, clip factor for maxNorm, finite, sumsq). */
export function gradNorm(
  gpu: Gpu,
  rec: Recorder,
  { grads, parts, stats }: GradNormBuffers,
  { n, maxNorm }: { n: number; maxNorm: number },
): void {
  need(grads, n * 4, "gradNorm grads");
  need(parts, adamwPartsBytes, "gradNorm parts");
  need(stats, adamwStatsBytes, "gradNorm stats");
  const nparts = Math.max(1, Math.min(ADAMW_PARTS, Math.ceil(n / WG)));
  const c = { lr: 0, beta1: 0, beta2: 0, eps: 0, weightDecay: 0, maxNorm };
  rec.dispatch(adamwSumsq, [grads, parts], nparts, params(n, nparts, c));
  rec.dispatch(adamwNorm, [parts, stats], 1, params(n, nparts, c));
}

export interface AdamWUpdateBuffers {
  weights: Buf; // (n,)
  grads: Buf; // (n,)
  m: Buf; // (n,) first moment
  v: Buf; // (n,) second moment
  stats: GPUBuffer; // from gradNorm
}

export interface AdamWDims {
  /** n parameters. */
  n: number;
  /** The optimizer step, 1-based (for the bias corrections). */
  step: number;
}

/** Records the AdamW update for step `step` (1-based), scaling grads by the clip factor in stats. */
export function adamwUpdate(
  gpu: Gpu,
  rec: Recorder,
  { weights, grads, m, v, stats }: AdamWUpdateBuffers,
  { n, step }: AdamWDims,
  config: AdamWConfig,
): void {
  if (!(Number.isInteger(step) && step >= 1)) throw new RangeError(`adamwUpdate: step ${step} must be an integer >= 1`);
  for (const [b, w] of [
    [weights, "weights"],
    [grads, "grads"],
    [m, "m"],
    [v, "v"],
  ] as const)
    need(b, n * 4, `adamwUpdate ${w}`);
  need(stats, adamwStatsBytes, "adamwUpdate stats");
  rec.dispatch(adamwForward, [weights, grads, m, v, stats], gpu.grid(Math.ceil(n / WG)), params(n, 1, config, step));
}

export interface AdamWBuffers {
  weights: GPUBuffer; // (n,)
  grads: GPUBuffer; // (n,)
  m: GPUBuffer; // (n,) first moment
  v: GPUBuffer; // (n,) second moment
  parts: GPUBuffer; // adamwPartsBytes of scratch
  stats: GPUBuffer; // adamwStatsBytes out
}

/** gradNorm + adamwUpdate: one optimizer step with global grad-norm clipping, no readback. */
export function adamwStep(gpu: Gpu, rec: Recorder, b: AdamWBuffers, dims: AdamWDims, config: AdamWConfig): void {
  gradNorm(gpu, rec, b, { n: dims.n, maxNorm: config.maxNorm });
  adamwUpdate(gpu, rec, b, dims, config);
}

/** grads *= scale (scale 0 writes exact zeros), e.g. to average accumulated micro-batch gradients. */
export function scaleGrads(
  gpu: Gpu,
  rec: Recorder,
  { grads }: { grads: GPUBuffer },
  { n, scale }: { n: number; scale: number },
): void {
  need(grads, n * 4, "scaleGrads grads");
  rec.dispatch(adamwScale, [grads], gpu.grid(Math.ceil(n / WG)), params(n, 1, undefined, 1, scale));
}
