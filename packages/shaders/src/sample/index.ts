// GPU decode sampling for B rows of logits (B, V): greedy / temperature, top-k, top-p, seeded per row,
// optional allowed-token bitmask. Only the token ids (B,) u32 and their logprobs (B,) f32 are read back.
//
// The reported logprob is log softmax(logits)[token] over the whole vocabulary at temperature 1,
// ignoring top-k, top-p and the bitmask: it is what the trainer recomputes from the model (the
// sampler's "old" logprob in GRPO), not the probability the filtered sampler drew it with. With
// `logprobAtTemperature` it is log softmax(logits / T) instead, for a trainer that divides by T too
// (greedy rows always report T = 1). A row with no allowed token yields token 0xffffffff, logprob -inf.
import { Params, sizeOf, type Gpu, type Recorder } from "@webart/gpu";
import code from "./sample.wgsl";
import { rowSpecs, rowThreads, type RowTuning } from "../util/row-threads.ts";

/** The kernel at a workgroup size (a power of two, 8..256; one workgroup per row). */
export const sampleSpec = rowSpecs("sample_forward", code);
const partialSpec = rowSpecs("sample_partial", code);
const pickSpec = rowSpecs("sample_pick", code);

/** Token id written for a row whose mask allows nothing. */
export const SAMPLE_NONE = 0xffffffff;

export interface SampleRow {
  /** <= 0: greedy argmax (first index on ties). */
  temperature: number;
  /** Keep the k highest logits (ties with the k-th kept too); 0 or >= allowed count: off. */
  topK?: number;
  /** Keep the highest tokens whose mass (after top-k) first reaches topP; >= 1: off. */
  topP?: number;
  /** Per-request seed (u32). */
  seed: number;
  /** Decode step of the sequence (u32). */
  step: number;
  /** Stream id within the request (u32), e.g. the choice index; defaults to the batch row. */
  stream?: number;
}

/** Packs per-row params (6 words a row) for the rows buffer. */
export function packSampleRows(rows: SampleRow[]): Uint32Array {
  const u = new Uint32Array(rows.length * 6);
  const f = new Float32Array(u.buffer);
  rows.forEach((r, b) => {
    f[b * 6] = r.temperature;
    u[b * 6 + 1] = r.topK ?? 0;
    f[b * 6 + 2] = r.topP ?? 1;
    u[b * 6 + 3] = r.seed >>> 0;
    u[b * 6 + 4] = r.step >>> 0;
    u[b * 6 + 5] = (r.stream ?? b) >>> 0;
  });
  return u;
}

/** u32 words per bitmask row. */
export const sampleMaskWords = (V: number): number => Math.ceil(V / 32);

/** A (B, ceil(V/32)) bitmask allowing only the listed token ids of each row. */
export function packAllowedMask(V: number, allowed: ArrayLike<number>[]): Uint32Array {
  const words = sampleMaskWords(V);
  const mask = new Uint32Array(allowed.length * words);
  allowed.forEach((ids, b) => {
    for (let i = 0; i < ids.length; i++) {
      const j = ids[i];
      if (!(j >= 0 && j < V)) throw new RangeError(`packAllowedMask: token ${j} of row ${b} is outside [0, ${V})`);
      mask[b * words + (j >>> 5)] |= 1 << (j & 31);
    }
  });
  return mask;
}

function need(buf: GPUBuffer, bytes: number, what: string): void {
  if (sizeOf(buf) < bytes) throw new RangeError(`${what}: buffer has ${buf.size} bytes, needs ${bytes}`);
}

export interface SampleBuffers {
  logits: GPUBuffer; // (B, V) f32
  rows: GPUBuffer; // packSampleRows
  tokens: GPUBuffer; // (B) u32 out
  logprobs: GPUBuffer; // (B) f32 out
  /** (B, sampleMaskWords(V)) u32: the tokens each row may take (constrained decoding). */
  mask?: GPUBuffer;
}

/** What start-up tuning chooses for sampling: threads a row, and on GPUs the chunks a row splits into (at batch 1). */
export interface SampleTuning extends RowTuning {
  split?: number;
}

/** Chunks a row may split into, as tuned on fast devices ("1": one workgroup a row). */
export const SAMPLE_SPLITS = ["1", "8", "32", "128"] as const;

/** Rows below which a step's sampling splits its rows (where `tuning.split` says so): more rows already spread. */
export const SPLIT_ROWS = 16;

/** The split a step of `rows` rows uses: the tuned one for few rows whose samplers have no top-k or top-p. */
export function sampleSplit(tuning: SampleTuning | undefined, rows: number, plain: boolean): number {
  return plain && rows < SPLIT_ROWS ? (tuning?.split ?? 1) : 1;
}

export interface SampleOptions {
  logprobAtTemperature?: boolean;
  wg?: number;
  tuning?: SampleTuning;
  /**
   * Split each row into this many chunks (2..wg), one workgroup each, then a second dispatch picks the token (for
   * GPUs, where one workgroup walking a row of V = 151936 takes as long as a projection). Only for rows without
   * top-k or top-p (the caller knows its rows); 0 or 1: one workgroup a row.
   */
  split?: number;
}

/** Samples one token per row; tokens (B,) u32 and logprobs (B,) f32 are written on the GPU. */
export function sample(
  gpu: Gpu,
  rec: Recorder,
  { logits, rows, tokens, logprobs, mask }: SampleBuffers,
  { B, V }: { B: number; V: number },
  opts: SampleOptions = {},
): void {
  if (B * V > 0xffffffff) throw new RangeError(`sample: B*V = ${B * V} passes 2^32`);
  need(logits, B * V * 4, "sample logits");
  need(rows, B * 24, "sample rows");
  need(tokens, B * 4, "sample tokens");
  need(logprobs, B * 4, "sample logprobs");
  if (mask) need(mask, B * sampleMaskWords(V) * 4, "sample mask");
  const wg = opts.wg ?? rowThreads(gpu, opts.tuning);
  const split = Math.min(opts.split ?? 1, V);
  if (!Number.isInteger(split) || split < 1 || split > wg)
    throw new RangeError(`sample: split ${opts.split} must be an integer from 1 to the workgroup size ${wg}`);
  const lpT = opts.logprobAtTemperature ? 1 : 0;
  const params = new Params().u32(B, V, sampleMaskWords(V), mask ? 1 : 0, lpT, split);
  // Without a mask the kernel never reads binding 3; the rows buffer fills the slot.
  if (split === 1) {
    rec.dispatch(sampleSpec(wg), [logits, rows, mask ?? rows, tokens, logprobs], gpu.grid(B), params);
    return;
  }
  if (B > gpu.limits.maxComputeWorkgroupsPerDimension)
    throw new RangeError(
      `sample: ${B} rows split into chunks pass the grid's ${gpu.limits.maxComputeWorkgroupsPerDimension}`,
    );
  const parts = gpu.buffer(B * split * 32, "activations", "sample partials");
  rec.dispatch(partialSpec(wg), [logits, rows, mask ?? rows, parts], [split, B, 1], params);
  rec.dispatch(pickSpec(wg), [logits, rows, mask ?? rows, tokens, logprobs, parts], gpu.grid(B), params);
  gpu.release(parts); // the pool keeps it until this recorder is submitted
}
