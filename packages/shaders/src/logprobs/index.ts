// Token logprobs, entropy and lse streamed over vocabulary chunks (N tokens, V vocab, a chunk of
// `cols` columns at offset v0), and their backward per chunk. Usage per micro-batch:
//   for each chunk: logits chunk = h @ W[v0:v0+cols]^T; logprobsChunk(...first: v0 === 0)
//   logprobsFinalize(...) -> logprob, entropy, lse
//   backward, for each chunk: recompute the chunk's logits; logprobsBackward(...) turns them into
//   dlogits in place; then dW[v0:v0+cols] += dlogits^T h and dh += dlogits W[v0:v0+cols].
// Targets must lie in [0, V); a row whose target is out of range gets a meaningless logprob (mask it).
// The temperature divides logits first; it must match how the sampler reported its logprobs (GRPO's
// old logprobs): `sample` reports temperature 1 unless asked for logprobAtTemperature.
import { Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forward from "./forward.wgsl";
import backward from "./backward.wgsl";
import { rowSpecs, rowThreads, type RowTuning } from "../util/row-threads.ts";

const WG = 256;
/** The chunk kernel with `wg` threads per row (a power of two, 8..256; default rowThreads(gpu, tuning)). */
export const logprobsForwardSpec = rowSpecs("logprobs_forward", forward);
export const logprobsFinalizeSpec: KernelSpec = { name: "logprobs_finalize", code: forward, overrides: { WG } };
export const logprobsBackwardSpec: KernelSpec = { name: "logprobs_backward", code: backward, overrides: { WG } };

/** Bytes of the running stats buffer for N rows (4 f32 per row). */
export const logprobsStatsBytes = (N: number): number => N * 16;

export interface LogprobsChunk {
  /** First vocabulary column of the chunk. */
  v0: number;
  /** Columns in the chunk (the last chunk may be narrower). */
  cols: number;
  /** Row stride of the chunk buffer in elements; defaults to cols. */
  ld?: number;
}

function need(buf: GPUBuffer, bytes: number, what: string): void {
  if (buf.size < bytes) throw new RangeError(`${what}: buffer has ${buf.size} bytes, needs ${bytes}`);
}

function chunkParams(N: number, c: LogprobsChunk, flag: number, temperature: number): Params {
  const ld = c.ld ?? c.cols;
  if (c.cols < 1 || ld < c.cols) throw new RangeError(`logprobs chunk: cols ${c.cols} must be >= 1 and <= ld ${ld}`);
  if (N * c.cols > 0xffffffff) throw new RangeError(`logprobs chunk: N*cols = ${N * c.cols} passes 2^32`);
  if (!(temperature > 0)) throw new RangeError(`logprobs: temperature ${temperature} must be > 0`);
  return new Params().u32(N, c.cols, ld, c.v0, flag).f32(temperature);
}

export interface LogprobsChunkBuffers {
  logits: GPUBuffer; // (N, ld)
  targets: GPUBuffer; // (N) u32
  stats: GPUBuffer; // (N, 4) f32, running
}

/** Folds one chunk of logits (N, ld) into the running stats (N, 4); `first` starts them afresh. */
export function logprobsChunk(
  gpu: Gpu,
  rec: Recorder,
  { logits, targets, stats }: LogprobsChunkBuffers,
  { N, ...chunk }: LogprobsChunk & { N: number },
  opts: { first: boolean; temperature?: number; wg?: number; tuning?: RowTuning },
): void {
  const params = chunkParams(N, chunk, opts.first ? 1 : 0, opts.temperature ?? 1);
  need(logits, ((N - 1) * (chunk.ld ?? chunk.cols) + chunk.cols) * 4, "logprobsChunk logits");
  need(targets, N * 4, "logprobsChunk targets");
  need(stats, logprobsStatsBytes(N), "logprobsChunk stats");
  rec.dispatch(
    logprobsForwardSpec(opts.wg ?? rowThreads(gpu, opts.tuning)),
    [logits, targets, stats],
    gpu.grid(N),
    params,
  );
}

/** Turns the stats after the last chunk into logprob, entropy and lse (each (N,) f32). */
export function logprobsFinalize(
  gpu: Gpu,
  rec: Recorder,
  { stats, logprob, entropy, lse }: { stats: GPUBuffer; logprob: GPUBuffer; entropy: GPUBuffer; lse: GPUBuffer },
  { N }: { N: number },
): void {
  need(stats, logprobsStatsBytes(N), "logprobsFinalize stats");
  for (const [b, w] of [
    [logprob, "logprob"],
    [entropy, "entropy"],
    [lse, "lse"],
  ] as const)
    need(b, N * 4, `logprobsFinalize ${w}`);
  const params = new Params().u32(N, 0, 0, 0, 0).f32(1);
  rec.dispatch(logprobsFinalizeSpec, [stats, logprob, entropy, lse], gpu.grid(Math.ceil(N / WG)), params);
}

/**
 * Overwrites a chunk of logits (N, ld) with dlogits for upstream dlogp (N,) and, when given,
 * dentropy (N,). lse and entropy come from logprobsFinalize with the same temperature.
 */
export interface LogprobsBackwardBuffers {
  logits: GPUBuffer; // (N, ld) in: logits, out: dlogits
  targets: GPUBuffer; // (N) u32
  lse: GPUBuffer; // (N)
  entropy: GPUBuffer; // (N)
  dlogp: GPUBuffer; // (N)
  /** (N): the entropy's upstream gradient, when it has one. */
  dentropy?: GPUBuffer;
}

export function logprobsBackward(
  gpu: Gpu,
  rec: Recorder,
  { logits, targets, lse, entropy, dlogp, dentropy }: LogprobsBackwardBuffers,
  { N, ...chunk }: LogprobsChunk & { N: number },
  { temperature = 1 }: { temperature?: number } = {},
): void {
  const params = chunkParams(N, chunk, dentropy ? 1 : 0, temperature);
  need(logits, ((N - 1) * (chunk.ld ?? chunk.cols) + chunk.cols) * 4, "logprobsBackward logits");
  for (const b of [targets, lse, entropy, dlogp, dentropy ?? dlogp]) need(b, N * 4, "logprobsBackward (N,) input");
  // Without dentropy the kernel never reads binding 6; dlogp fills the slot.
  const bindings = [logits, targets, lse, entropy, dlogp, dentropy ?? dlogp];
  rec.dispatch(logprobsBackwardSpec, bindings, gpu.grid(Math.ceil((N * chunk.cols) / WG)), params);
}
