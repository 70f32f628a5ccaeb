// Token logprobs, entropy and lse streamed over vocabulary chunks (N tokens, V vocab, a chunk of
// `cols` columns at offset v0), and their backward per chunk. Usage per micro-batch:
//   for each chunk: logits chunk = h @ W[v0:v0+cols]^T; logprobsChunk(...first: v0 === 0)
//   logprobsFinalize(...) -> logprob, entropy, lse
//   backward, for each chunk: recompute the chunk's logits; logprobsBackward(...) turns them into
//   dlogits in place; then dW[v0:v0+cols] += dlogits^T h and dh += dlogits W[v0:v0+cols].
// Targets must lie in [0, V); a row whose target is out of range gets a meaningless logprob (mask it).
// A row may also carry an allowed set (`allow`, packAllowed): the tokens a constrained sampler could draw from.
// Its logprob, entropy and lse are then those of the softmax over that set alone, the distribution the token was
// drawn from, and its backward gives the other columns 0.
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

function chunkParams(N: number, c: LogprobsChunk, flag: number, temperature: number, masked: boolean): Params {
  const ld = c.ld ?? c.cols;
  if (c.cols < 1 || ld < c.cols) throw new RangeError(`logprobs chunk: cols ${c.cols} must be >= 1 and <= ld ${ld}`);
  if (N * c.cols > 0xffffffff) throw new RangeError(`logprobs chunk: N*cols = ${N * c.cols} passes 2^32`);
  if (!(temperature > 0)) throw new RangeError(`logprobs: temperature ${temperature} must be > 0`);
  return new Params()
    .u32(N, c.cols, ld, c.v0, flag)
    .f32(temperature)
    .u32(masked ? 1 : 0);
}

/** The word in packAllowed's header for a row with no mask (every token allowed). */
export const ALLOW_ALL = 0xffffffff;

/**
 * The `allow` buffer's contents for N rows: a header of N words, each the offset (in words, from the buffer's
 * start) of that row's bitmask over the vocabulary (bit v & 31 of word v >> 5 set = token v allowed), or ALLOW_ALL
 * for a row with none; then the distinct masks, each once (rows that share a mask object share its words).
 */
export function packAllowed(rows: readonly (Uint32Array | null | undefined)[], words: number): Uint32Array {
  const at = new Map<Uint32Array, number>();
  let size = rows.length;
  for (const m of rows) {
    if (!m || at.has(m)) continue;
    if (m.length !== words)
      throw new RangeError(`packAllowed: a mask has ${m.length} words; the vocabulary needs ${words}`);
    at.set(m, size);
    size += words;
  }
  const out = new Uint32Array(size);
  rows.forEach((m, i) => (out[i] = m ? at.get(m)! : ALLOW_ALL));
  for (const [m, off] of at) out.set(m, off);
  return out;
}

export interface LogprobsChunkBuffers {
  logits: GPUBuffer; // (N, ld)
  targets: GPUBuffer; // (N) u32
  stats: GPUBuffer; // (N, 4) f32, running
  /** packAllowed's words: rows with an allowed set (absent: every row over the whole vocabulary). */
  allow?: GPUBuffer | null;
}

/** Folds one chunk of logits (N, ld) into the running stats (N, 4); `first` starts them afresh. */
export function logprobsChunk(
  gpu: Gpu,
  rec: Recorder,
  { logits, targets, stats, allow }: LogprobsChunkBuffers,
  { N, ...chunk }: LogprobsChunk & { N: number },
  opts: { first: boolean; temperature?: number; wg?: number; tuning?: RowTuning },
): void {
  const params = chunkParams(N, chunk, opts.first ? 1 : 0, opts.temperature ?? 1, !!allow);
  need(logits, ((N - 1) * (chunk.ld ?? chunk.cols) + chunk.cols) * 4, "logprobsChunk logits");
  need(targets, N * 4, "logprobsChunk targets");
  need(stats, logprobsStatsBytes(N), "logprobsChunk stats");
  if (allow) need(allow, N * 4, "logprobsChunk allow");
  // Without masks the kernel never reads binding 4; targets fills the slot.
  rec.dispatch(
    logprobsForwardSpec(opts.wg ?? rowThreads(gpu, opts.tuning)),
    [logits, targets, stats, allow ?? targets],
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
  /** The forward's `allow`, when it had one. */
  allow?: GPUBuffer | null;
}

export function logprobsBackward(
  gpu: Gpu,
  rec: Recorder,
  { logits, targets, lse, entropy, dlogp, dentropy, allow }: LogprobsBackwardBuffers,
  { N, ...chunk }: LogprobsChunk & { N: number },
  { temperature = 1 }: { temperature?: number } = {},
): void {
  const params = chunkParams(N, chunk, dentropy ? 1 : 0, temperature, !!allow);
  if (allow) need(allow, N * 4, "logprobsBackward allow");
  need(logits, ((N - 1) * (chunk.ld ?? chunk.cols) + chunk.cols) * 4, "logprobsBackward logits");
  for (const b of [targets, lse, entropy, dlogp, dentropy ?? dlogp]) need(b, N * 4, "logprobsBackward (N,) input");
  // Without dentropy (masks) the kernel never reads binding 6 (7); dlogp (targets) fills the slot.
  const bindings = [logits, targets, lse, entropy, dlogp, dentropy ?? dlogp, allow ?? targets];
  rec.dispatch(logprobsBackwardSpec, bindings, gpu.grid(Math.ceil((N * chunk.cols) / WG)), params);
}
