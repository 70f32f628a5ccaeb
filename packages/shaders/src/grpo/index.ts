// GRPO per-token loss and dloss/dnew on the GPU (N tokens, S sequences). Inputs per token: new logprob
// (from the logprobs kernel), old (sampler) logprob, optional reference logprob, and packed meta
// (advantage, weight = loss mask * normalisation from the CPU, sequence id). Outputs: dnew (N,) for the
// logprobs backward, per-token (weighted loss, kl, clipped, ratio) (N, 4), and 8 totals for metrics.
//   PPO-clip: loss = -min(r A, clip(r, 1 - eps, 1 + epsHigh) A)
//   CISPO:    loss = -sg(clip(r, 1 - eps, 1 + epsHigh)) A logp_new
//   ratio r:  token: exp(new - old); sequence (GSPO): exp(mean over the sequence's masked tokens of new - old)
//   KL (k3):  kl = exp(ref - new) - (ref - new) - 1, added as beta * klWeight * kl (klWeight: the loss weight
//             unless packed apart, e.g. a KL term on tokens that have no advantage)
// Log-ratios and ref - new are clamped to +-20 (gradient 0 beyond) so exp stays finite. A NaN old
// logprob means none was recorded: old = sg(new), ratio 1, as ART does. Masked = weight != 0.
import { Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./loss_grad.wgsl";

const WG = 256;
export const grpoForward: KernelSpec = { name: "grpo_forward", code, overrides: { WG } };
export const grpoSequence: KernelSpec = { name: "grpo_sequence", code, overrides: { WG } };

/** Index of each total in the totals buffer (8 f32). */
export const GRPO_TOTALS = {
  loss: 0,
  policy: 1,
  kl: 2,
  clipped: 3,
  masked: 4,
  clipFraction: 5,
  ratioSum: 6,
} as const;
export const grpoTotalsBytes = 32;
/** 32-bit words per token in the meta buffer (packGrpoMeta). */
export const GRPO_META_WORDS = 4;
export const grpoSeqStatsBytes = (S: number): number => S * 16;

export interface GrpoOptions {
  loss: "ppo" | "cispo";
  /** Importance ratio per token (default) or per sequence (GSPO). */
  level?: "token" | "sequence";
  /** Lower clip: ratio >= 1 - epsilon (ART: 0.2 for PPO, 1.0 for CISPO). */
  epsilon: number;
  /** Upper clip: ratio <= 1 + epsilonHigh; defaults to epsilon (ART CISPO: 4.0). */
  epsilonHigh?: number;
  /** KL coefficient (default 0); the KL is measured whenever lpRef is given. */
  beta?: number;
  /** Add to the totals already in the buffer (summing micro-batches); clip fraction is recomputed. */
  accumulate?: boolean;
}

/**
 * Packs (advantage, weight, sequence id, KL weight) per token, 4 words each, for the meta buffer. The KL term of a
 * token is beta * klWeight * kl; klWeight defaults to its loss weight, so beta alone sets it.
 */
export function packGrpoMeta(
  advantage: ArrayLike<number>,
  weight: ArrayLike<number>,
  seq: ArrayLike<number>,
  klWeight: ArrayLike<number> = weight,
): Uint32Array {
  const N = advantage.length;
  if (weight.length !== N || seq.length !== N || klWeight.length !== N)
    throw new RangeError(
      `packGrpoMeta: lengths differ (advantage ${N}, weight ${weight.length}, seq ${seq.length}, klWeight ${klWeight.length})`,
    );
  const u = new Uint32Array(N * GRPO_META_WORDS);
  const f = new Float32Array(u.buffer);
  for (let i = 0; i < N; i++) {
    const k = GRPO_META_WORDS * i;
    f[k] = advantage[i];
    f[k + 1] = weight[i];
    u[k + 2] = seq[i];
    f[k + 3] = klWeight[i];
  }
  return u;
}

function need(buf: GPUBuffer, bytes: number, what: string): void {
  if (buf.size < bytes) throw new RangeError(`${what}: buffer has ${buf.size} bytes, needs ${bytes}`);
}

export interface GrpoBuffers {
  lpNew: GPUBuffer; // (N,)
  lpOld: GPUBuffer; // (N,)
  lpRef?: GPUBuffer | null; // (N,)
  meta: GPUBuffer; // packGrpoMeta
  /** (S, 4) scratch: needed at sequence level. */
  seqStats?: GPUBuffer | null;
  dnew: GPUBuffer; // (N,) out
  perToken: GPUBuffer; // (N, 4) out
  totals: GPUBuffer; // 8 f32, out
}

export interface GrpoDims {
  /** N tokens. */
  N: number;
  /** S sequences (read at sequence level only). */
  S: number;
}

/** Records the GRPO loss, its gradient dnew and the totals for N tokens in S sequences. */
export function grpoLoss(gpu: Gpu, rec: Recorder, b: GrpoBuffers, { N, S }: GrpoDims, o: GrpoOptions): void {
  const seqLevel = o.level === "sequence";
  const beta = o.beta ?? 0;
  if (N < 1) throw new RangeError(`grpoLoss: N = ${N} tokens; need at least 1`);
  if (beta !== 0 && !b.lpRef) throw new Error(`grpoLoss: beta ${beta} needs reference logprobs (lpRef)`);
  if (seqLevel && (S < 1 || !b.seqStats))
    throw new Error("grpoLoss: sequence level needs S >= 1 and a seqStats buffer");
  for (const [x, what] of [
    [b.lpNew, "lpNew"],
    [b.lpOld, "lpOld"],
    [b.lpRef ?? b.lpOld, "lpRef"],
    [b.dnew, "dnew"],
  ] as const)
    need(x, N * 4, `grpoLoss ${what}`);
  need(b.meta, N * GRPO_META_WORDS * 4, "grpoLoss meta");
  need(b.perToken, N * 16, "grpoLoss perToken");
  need(b.totals, grpoTotalsBytes, "grpoLoss totals");
  if (seqLevel) need(b.seqStats!, grpoSeqStatsBytes(S), "grpoLoss seqStats");
  const params = new Params()
    .u32(N, seqLevel ? S : 0, o.loss === "cispo" ? 1 : 0, seqLevel ? 1 : 0, b.lpRef ? 1 : 0, o.accumulate ? 1 : 0)
    .f32(o.epsilon, o.epsilonHigh ?? o.epsilon, beta);
  if (seqLevel) rec.dispatch(grpoSequence, [b.lpNew, b.lpOld, b.meta, b.seqStats!], gpu.grid(S), params);
  // Unused slots (no reference, token level) are filled with lpOld; the kernel does not read them.
  const bindings = [b.lpNew, b.lpOld, b.lpRef ?? b.lpOld, b.meta, b.seqStats ?? b.lpOld, b.dnew, b.perToken, b.totals];
  rec.dispatch(grpoForward, bindings, 1, params);
}
