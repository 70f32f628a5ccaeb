// One GRPO step on the GPU: micro-batches of whole sequences → forward with LoRA (activations kept) →
// token logprobs in vocabulary chunks → GRPO loss and its gradient → backward into LoRA A/B (accumulated)
// → global grad-norm clip + AdamW. One readback at the end (loss totals, grad norm, entropy).
import type { Gpu, Recorder } from "@webart/gpu";
import {
  adamwPartsBytes,
  adamwStatsBytes,
  adamwStep,
  GRPO_TOTALS,
  grpoLoss,
  grpoSeqStatsBytes,
  grpoTotalsBytes,
  packGrpoMeta,
  logprobsBackward,
  logprobsChunk,
  logprobsFinalize,
  logprobsStatsBytes,
  rmsnorm,
  trainingSlotPos,
} from "@webart/shaders";
import type { Model } from "../model/model.ts";

/** A trajectory ready for the GPU: tokens, which positions are trained, and its loss coefficient. */
export interface TrainSequence {
  ids: ArrayLike<number>; // (T)
  /** 1 at positions whose token was sampled (trained). */
  mask: ArrayLike<number>; // (T)
  /** The sampler's logprob of ids[t] at each position (NaN = none recorded: ratio 1). */
  oldLogprobs: ArrayLike<number>; // (T)
  /** Reference logprobs per position; computed with the adapter off when beta > 0 and absent. */
  refLogprobs?: ArrayLike<number>;
  advantage: number;
  /** Loss coefficient c of each trained token (the normalisation of the loss type). */
  coef: number;
}

export interface GrpoOptions {
  loss: "ppo" | "cispo";
  level: "token" | "sequence";
  epsilon: number;
  epsilonHigh: number;
  beta: number;
  /** Tokens (B x T, padded) per micro-batch. */
  microBatchTokens: number;
  /** Vocabulary columns per logits chunk. */
  vocabChunk?: number;
  /** Keep only each layer's input and run its forward again in backward (the planner decides; default off). */
  recompute?: boolean;
}

export interface GradResult {
  loss: number;
  policyLoss: number;
  kl: number;
  clipFraction: number;
  /** Mean entropy of the policy over trained tokens. */
  entropy: number;
  trainedTokens: number;
  microBatches: number;
  /** Compute dispatches recorded for the step's gradient (every micro-batch's forward, loss and backward). */
  dispatches: number;
  /** Per sequence, the policy's logprob at each position (0 at position 0), when asked for. */
  newLogprobs?: Float32Array[];
}

/** Greedy packing of whole sequences, in order, so that B x max(T) stays within the budget. */
export function microBatches(lengths: number[], budget: number): number[][] {
  const out: number[][] = [];
  let cur: number[] = [];
  let maxT = 0;
  lengths.forEach((T, i) => {
    const m = Math.max(maxT, T);
    if (cur.length && m * (cur.length + 1) > budget) {
      out.push(cur);
      cur = [];
      maxT = 0;
    }
    cur.push(i);
    maxT = Math.max(maxT, T);
  });
  if (cur.length) out.push(cur);
  return out;
}

/**
 * Token logprobs of `targets` from final-normed states h (N, C), streaming the LM head over vocabulary
 * chunks; writes lp, entropy and lse (N each).
 */
export function headLogprobs(
  model: Model,
  rec: Recorder,
  h: GPUBuffer,
  targets: GPUBuffer,
  N: number,
  lp: GPUBuffer,
  ent: GPUBuffer,
  lse: GPUBuffer,
  chunk: number,
): void {
  const gpu = model.gpu;
  const V = model.config.vocabSize;
  const stats = gpu.buffer(logprobsStatsBytes(N), "activations", "logprob stats");
  const logits = gpu.buffer(N * Math.min(chunk, V) * 4, "activations", "logits chunk");
  for (let v0 = 0; v0 < V; v0 += chunk) {
    const cols = Math.min(chunk, V - v0);
    model.head(rec, h, N, logits, v0, v0 + cols, cols);
    logprobsChunk(gpu, rec, logits, targets, stats, N, { v0, cols }, { first: v0 === 0 });
  }
  logprobsFinalize(gpu, rec, stats, lp, ent, lse, N);
  gpu.release(stats, logits);
}

/**
 * Accumulates the GRPO gradient of the whole step into lora.grads (zeroed first). Every coefficient is
 * already normalised over the whole step, so micro-batching gives the same gradient as one batch.
 */
export async function accumulateGradients(
  model: Model,
  seqs: TrainSequence[],
  o: GrpoOptions,
  want: { newLogprobs?: boolean } = {},
): Promise<GradResult & { totals: GPUBuffer; entropyAll: GPUBuffer; maskAll: Float32Array }> {
  const gpu = model.gpu;
  const lora = model.lora;
  if (!lora) throw new Error("train: no LoRA adapter attached");
  lora.ensureOptimizer();
  const C = model.config.hiddenSize;
  const V = model.config.vocabSize;
  const chunk = Math.min(o.vocabChunk ?? 8192, V);
  const totals = gpu.buffer(grpoTotalsBytes, "optimizer", "grpo totals");
  const totalRows = seqs.reduce((s, q) => s + q.ids.length, 0);
  const entropyAll = gpu.buffer(Math.max(1, totalRows) * 4, "optimizer", "entropy");
  const lpAll = want.newLogprobs ? gpu.buffer(Math.max(1, totalRows) * 4, "optimizer", "new logprobs") : undefined;
  const maskAll = new Float32Array(totalRows);
  {
    const rec = gpu.recorder();
    rec.clear(lora.grads!);
    rec.clear(totals);
    await rec.submit();
  }
  const batches = microBatches(
    seqs.map((s) => s.ids.length),
    o.microBatchTokens,
  );
  let rowBase = 0;
  const rowOf: number[] = [];
  let trained = 0;
  let dispatches = 0;
  for (const [mbIndex, idx] of batches.entries()) {
    const B = idx.length;
    const T = Math.max(...idx.map((i) => seqs[i].ids.length));
    const N = B * T;
    const ids = new Uint32Array(N);
    const targets = new Uint32Array(N);
    const adv = new Float32Array(N);
    const weight = new Float32Array(N);
    const seqId = new Uint32Array(N);
    const old = new Float32Array(N);
    const ref = new Float32Array(N);
    const needRef = o.beta > 0;
    let haveRef = true;
    idx.forEach((si, b) => {
      const s = seqs[si];
      const L = s.ids.length;
      rowOf[si] = rowBase;
      for (let t = 0; t < T; t++) {
        const r = b * T + t;
        seqId[r] = b;
        if (t >= L) continue;
        ids[r] = s.ids[t];
        // Row t predicts the token at position t + 1.
        if (t + 1 < L) {
          targets[r] = s.ids[t + 1];
          const m = s.mask[t + 1] ? 1 : 0;
          weight[r] = m * s.coef;
          adv[r] = s.advantage;
          old[r] = s.oldLogprobs[t + 1];
          if (s.refLogprobs) ref[r] = s.refLogprobs[t + 1];
          else haveRef = false;
          maskAll[rowBase + t] = m;
          trained += m;
        }
      }
      rowBase += L;
    });
    const up = (a: ArrayBufferView) => gpu.upload(a, "activations");
    const bIds = up(ids);
    const bTargets = up(targets);
    const slotPos = up(trainingSlotPos(B, T));
    const bOld = up(old);
    const meta = up(packGrpoMeta(adv, weight, seqId));
    const rec = gpu.recorder();
    let bRef: GPUBuffer | undefined;
    const tmp: GPUBuffer[] = [bIds, bTargets, slotPos, bOld, meta];
    if (needRef) {
      if (haveRef) bRef = up(ref);
      else {
        // Reference logprobs: the same model with the adapter switched off.
        bRef = gpu.buffer(N * 4, "activations", "ref logprobs");
        lora.enabled = false;
        try {
          const { x } = model.forward(rec, bIds, N, { kind: "train", B, T, slotPos }, false);
          const h = gpu.buffer(N * C * 4, "activations", "ref h");
          const rstd = gpu.buffer(N * 4, "activations", "ref rstd");
          rmsnorm(gpu, rec, x, model.weights.finalNorm, h, rstd, N, C, model.config.rmsNormEps);
          const e = gpu.buffer(N * 4, "activations");
          const l = gpu.buffer(N * 4, "activations");
          headLogprobs(model, rec, h, bTargets, N, bRef, e, l, chunk);
          gpu.release(x, h, rstd, e, l);
        } finally {
          lora.enabled = true;
        }
      }
      tmp.push(bRef);
    }
    // Forward with LoRA, keeping activations.
    const { acts } = model.forward(rec, bIds, N, { kind: "train", B, T, slotPos }, true, o.recompute);
    const lp = gpu.buffer(N * 4, "activations", "lp new");
    const ent = gpu.buffer(N * 4, "activations", "entropy");
    const lse = gpu.buffer(N * 4, "activations", "lse");
    headLogprobs(model, rec, acts!.hN, bTargets, N, lp, ent, lse, chunk);
    // Loss and dloss/dlp on the GPU.
    const dnew = gpu.buffer(N * 4, "activations", "dnew");
    const perToken = gpu.buffer(N * 16, "activations", "per token");
    const seqStats = o.level === "sequence" ? gpu.buffer(grpoSeqStatsBytes(B), "activations") : undefined;
    grpoLoss(gpu, rec, { lpNew: lp, lpOld: bOld, lpRef: bRef ?? null, meta, seqStats, dnew, perToken, totals }, N, B, {
      loss: o.loss,
      level: o.level,
      epsilon: o.epsilon,
      epsilonHigh: o.epsilonHigh,
      beta: o.beta,
      accumulate: mbIndex > 0,
    });
    // Keep per-row entropy (and logprobs) of real rows for the metrics read at the end.
    idx.forEach((si, b) => {
      const L = seqs[si].ids.length;
      rec.copy(ent, b * T * 4, entropyAll, rowOf[si] * 4, L * 4);
      if (lpAll) rec.copy(lp, b * T * 4, lpAll, rowOf[si] * 4, L * 4);
    });
    // Backward through the LM head, chunk by chunk (logits recomputed), into dhN.
    const dhN = gpu.buffer(N * C * 4, "activations", "dhN");
    rec.clear(dhN);
    const logits = gpu.buffer(N * chunk * 4, "activations", "logits chunk");
    for (let v0 = 0; v0 < V; v0 += chunk) {
      const cols = Math.min(chunk, V - v0);
      model.head(rec, acts!.hN, N, logits, v0, v0 + cols, cols);
      logprobsBackward(gpu, rec, logits, bTargets, lse, ent, dnew, null, N, { v0, cols });
      model.headBack(rec, logits, N, dhN, v0, v0 + cols);
    }
    gpu.release(lp, ent, lse, dnew, perToken, seqStats, logits);
    model.backward(rec, acts!, dhN, { B, T });
    gpu.release(...tmp, dhN);
    dispatches += rec.dispatches;
    await rec.submit();
  }
  const rec = gpu.recorder();
  const tRead = rec.read(totals, grpoTotalsBytes);
  const lRead = lpAll ? rec.read(lpAll, totalRows * 4) : undefined;
  const eRead = rec.read(entropyAll, totalRows * 4);
  await rec.submit();
  const t = new Float32Array(await tRead);
  const e = new Float32Array(await eRead);
  let entSum = 0;
  for (let i = 0; i < totalRows; i++) entSum += maskAll[i] * e[i];
  const res: GradResult & { totals: GPUBuffer; entropyAll: GPUBuffer; maskAll: Float32Array } = {
    loss: t[GRPO_TOTALS.loss],
    policyLoss: t[GRPO_TOTALS.policy],
    kl: t[GRPO_TOTALS.kl],
    clipFraction: t[GRPO_TOTALS.clipFraction],
    entropy: trained ? entSum / trained : 0,
    trainedTokens: trained,
    microBatches: batches.length,
    dispatches,
    totals,
    entropyAll,
    maskAll,
  };
  if (lRead) {
    const all = new Float32Array(await lRead);
    // Row t holds the logprob of position t + 1: shift to per-position arrays.
    res.newLogprobs = seqs.map((s, i) => {
      const out = new Float32Array(s.ids.length);
      out.set(all.subarray(rowOf[i], rowOf[i] + s.ids.length - 1), 1);
      return out;
    });
    gpu.release(lpAll);
  }
  return res;
}

export interface OptimizerConfig {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  maxGradNorm: number;
}

/** Clips the global grad norm and applies AdamW to the LoRA parameters; returns the grad norm. */
export async function optimizerStep(
  model: Model,
  o: OptimizerConfig,
  step: number,
): Promise<{ gradNorm: number; finite: boolean; dispatches: number }> {
  const gpu: Gpu = model.gpu;
  const lora = model.lora!;
  const parts = gpu.buffer(adamwPartsBytes, "optimizer", "adam parts");
  const stats = gpu.buffer(adamwStatsBytes, "optimizer", "adam stats");
  const rec = gpu.recorder();
  adamwStep(
    gpu,
    rec,
    { weights: lora.params, grads: lora.grads!, m: lora.m!, v: lora.v!, parts, stats },
    lora.size,
    { lr: o.lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weightDecay: o.weightDecay, maxNorm: o.maxGradNorm },
    step,
  );
  const r = rec.read(stats, adamwStatsBytes);
  gpu.release(parts, stats);
  const dispatches = rec.dispatches;
  await rec.submit();
  const s = new Float32Array(await r);
  return { gradNorm: s[0], finite: s[2] !== 0, dispatches };
}
