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
  packAllowed,
  grpoSeqStatsBytes,
  grpoTotalsBytes,
  packGrpoMeta,
  rmsnormForward,
  trainingSlotPos,
} from "@webart/shaders";
import type { Activations, Model } from "../model/model.ts";
import { headBackward, headLogprobs } from "./head.ts";

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
  /**
   * 1 at positions held to the reference by the KL term alone (advantage 0, coefficient `coef` x anchorBeta): context
   * turns the model did not sample. Used only when anchorBeta > 0 and the ratio is per token; never counted as trained.
   */
  anchor?: ArrayLike<number>;
  /** 1 at trained positions whose token was forced, not sampled (SampledChoice.forced): no KL term there. */
  forced?: ArrayLike<number>;
  /**
   * Per position, the set its token was drawn from when a constraint masked the sampler (a bitmask over the
   * vocabulary, bit v & 31 of word v >> 5; null: the whole vocabulary). The policy's, and the reference's, logprob
   * there is the softmax over that set alone, as sampled; the old logprob is then taken as none (ratio 1), since
   * the sampler reports the whole vocabulary's.
   */
  allowed?: readonly (Uint32Array | null)[];
}

export interface GrpoOptions {
  loss: "ppo" | "cispo";
  level: "token" | "sequence";
  epsilon: number;
  epsilonHigh: number;
  /** KL coefficient on the sampled (trained) tokens. */
  beta: number;
  /** KL coefficient on the anchored positions (TrainSequence.anchor); default beta. */
  anchorBeta?: number;
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
  /** The k3 KL estimate summed with the loss weights over the positions the KL term covers (not forced tokens). */
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

/**
 * Greedy packing of whole sequences so that B x max(T) stays within the budget, longest first: a micro-batch pads
 * its sequences to its longest, so sequences of like length share one (ties keep their order).
 */
export function microBatches(lengths: number[], budget: number): number[][] {
  const out: number[][] = [];
  let cur: number[] = [];
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[b] - lengths[a] || a - b);
  for (const i of order) {
    // The batch's first sequence is its longest.
    if (cur.length && lengths[cur[0]] * (cur.length + 1) > budget) {
      out.push(cur);
      cur = [];
    }
    cur.push(i);
  }
  if (cur.length) out.push(cur);
  return out;
}

/**
 * Accumulates the GRPO gradient of the whole step into lora.grads (zeroed first). Every coefficient is
 * already normalised over the whole step, so micro-batching gives the same gradient as one batch.
 * Pack micro-batches; per micro-batch, reference logprobs → forward → loss and gradient → head backward →
 * layer backward (microBatchGradient); then read the metrics back.
 */
export async function accumulateGradients(
  model: Model,
  seqs: TrainSequence[],
  o: GrpoOptions,
  want: { newLogprobs?: boolean } = {},
): Promise<GradResult & { totals: GPUBuffer; entropyAll: GPUBuffer; maskAll: Float32Array }> {
  const lora = model.lora;
  if (!lora) throw new Error("train: no LoRA adapter attached");
  lora.ensureOptimizer();
  const rows = stepRows(seqs);
  const out = await startStep(model, rows.total, want.newLogprobs ?? false);
  const batches = microBatches(
    seqs.map((s) => s.ids.length),
    o.microBatchTokens,
  );
  const chunk = Math.min(o.vocabChunk ?? 8192, model.config.vocabSize);
  let dispatches = 0;
  for (const [i, idx] of batches.entries())
    dispatches += await microBatchGradient(model, packMicroBatch(seqs, idx, o), rows, out, o, chunk, i > 0);
  return readMetrics(model, seqs, rows, out, batches.length, dispatches);
}

/** Where each sequence's rows sit in the step's per-row buffers, and which rows are trained. */
interface StepRows {
  /** First row of sequence i (its rows in order, sequences one after the other). */
  rowOf: number[];
  /** 1 for a trained row: row t of a sequence predicts its token t + 1, trained when that token was sampled. */
  maskAll: Float32Array; // (total)
  trained: number;
  total: number;
}

function stepRows(seqs: TrainSequence[]): StepRows {
  const total = seqs.reduce((s, q) => s + q.ids.length, 0);
  const rowOf: number[] = [];
  const maskAll = new Float32Array(total);
  let trained = 0;
  let row = 0;
  seqs.forEach((s, i) => {
    rowOf[i] = row;
    for (let t = 0; t + 1 < s.ids.length; t++) {
      const m = s.mask[t + 1] ? 1 : 0;
      maskAll[row + t] = m;
      trained += m;
    }
    row += s.ids.length;
  });
  return { rowOf, maskAll, trained, total };
}

/** What the whole step accumulates on the GPU: the loss totals, and each row's entropy (and logprob). */
interface StepBuffers {
  totals: GPUBuffer;
  entropyAll: GPUBuffer; // (rows)
  lpAll?: GPUBuffer; // (rows)
}

/** Allocates the step's buffers and zeroes the LoRA gradients and the totals. */
async function startStep(model: Model, rows: number, newLogprobs: boolean): Promise<StepBuffers> {
  const gpu = model.gpu;
  const totals = gpu.buffer(grpoTotalsBytes, "optimizer", "grpo totals");
  const entropyAll = gpu.buffer(Math.max(1, rows) * 4, "optimizer", "entropy");
  const lpAll = newLogprobs ? gpu.buffer(Math.max(1, rows) * 4, "optimizer", "new logprobs") : undefined;
  const rec = gpu.recorder();
  rec.clear(model.lora!.grads!);
  rec.clear(totals);
  await rec.submit();
  return { totals, entropyAll, lpAll };
}

/** One micro-batch on the CPU: B sequences padded to T, row t of a sequence predicting its token t + 1. */
interface PackedBatch {
  /** The step's sequences in this micro-batch, in order, and their lengths. */
  seqs: number[];
  lengths: number[];
  B: number;
  T: number;
  N: number; // B * T
  ids: Uint32Array; // (N)
  targets: Uint32Array; // (N)
  adv: Float32Array; // (N)
  /** The loss coefficient of a trained or anchored row, 0 elsewhere. */
  weight: Float32Array; // (N)
  /** The KL term's coefficient of each row: weight x beta (trained) or x anchorBeta (anchored). */
  klWeight: Float32Array; // (N)
  seqId: Uint32Array; // (N)
  old: Float32Array; // (N)
  ref: Float32Array; // (N)
  /** Every sequence brought its reference logprobs (otherwise the reference pass computes them). */
  haveRef: boolean;
  /** Each row's allowed set (TrainSequence.allowed of its target), when any row has one. */
  allowed?: (Uint32Array | null)[];
}

/** The KL coefficient of anchored positions: anchorBeta (default beta), and 0 unless the ratio is per token. */
const anchorCoefficient = (o: GrpoOptions): number => (o.level === "token" ? (o.anchorBeta ?? o.beta) : 0);

/** Pack micro-batches: the sequences `idx` padded to their longest, each row with its target and loss terms. */
function packMicroBatch(seqs: TrainSequence[], idx: number[], o: GrpoOptions): PackedBatch {
  const anchorBeta = anchorCoefficient(o);
  const B = idx.length;
  const T = Math.max(...idx.map((i) => seqs[i].ids.length));
  const N = B * T;
  const p: PackedBatch = {
    seqs: idx,
    lengths: idx.map((i) => seqs[i].ids.length),
    B,
    T,
    N,
    ids: new Uint32Array(N),
    targets: new Uint32Array(N),
    adv: new Float32Array(N),
    weight: new Float32Array(N),
    klWeight: new Float32Array(N),
    seqId: new Uint32Array(N),
    old: new Float32Array(N),
    ref: new Float32Array(N),
    haveRef: true,
    allowed: idx.some((i) => seqs[i].allowed) ? new Array<Uint32Array | null>(N).fill(null) : undefined,
  };
  idx.forEach((si, b) => {
    const s = seqs[si];
    const L = s.ids.length;
    for (let t = 0; t < T; t++) {
      const r = b * T + t;
      p.seqId[r] = b;
      if (t >= L) continue;
      p.ids[r] = s.ids[t];
      if (t + 1 < L) {
        p.targets[r] = s.ids[t + 1];
        const trained = s.mask[t + 1] ? 1 : 0;
        const held = !trained && anchorBeta > 0 && s.anchor?.[t + 1] ? 1 : 0;
        p.weight[r] = (trained + held) * s.coef;
        const sampled = trained && !s.forced?.[t + 1] ? 1 : 0;
        p.klWeight[r] = (sampled * o.beta + held * anchorBeta) * s.coef;
        p.adv[r] = trained ? s.advantage : 0;
        p.old[r] = s.oldLogprobs[t + 1];
        const set = s.allowed?.[t + 1];
        if (set) {
          p.allowed![r] = set;
          p.old[r] = NaN; // the sampler's logprob is the whole vocabulary's: ratio 1 (the step is on-policy)
        }
        if (s.refLogprobs) p.ref[r] = s.refLogprobs[t + 1];
        else p.haveRef = false;
      }
    }
  });
  return p;
}

/** A packed micro-batch on the GPU. */
interface BatchInputs {
  ids: GPUBuffer;
  targets: GPUBuffer;
  slotPos: GPUBuffer;
  old: GPUBuffer;
  /** Advantage, loss weight and sequence of each row (packGrpoMeta). */
  meta: GPUBuffer;
  /** The rows' allowed sets (packAllowed), when any row has one. */
  allow?: GPUBuffer;
}

function uploadBatch(gpu: Gpu, p: PackedBatch, vocabSize: number): BatchInputs {
  const up = (a: ArrayBufferView) => gpu.upload(a, "activations");
  return {
    ids: up(p.ids),
    targets: up(p.targets),
    slotPos: up(trainingSlotPos(p.B, p.T)),
    old: up(p.old),
    meta: up(packGrpoMeta(p.adv, p.weight, p.seqId, p.klWeight)),
    allow: p.allowed ? up(packAllowed(p.allowed, Math.ceil(vocabSize / 32))) : undefined,
  };
}

/**
 * The gradient of one micro-batch, added to lora.grads and its loss to the totals, in one submit: reference
 * logprobs → forward → loss and gradient → head backward → layer backward. Returns its dispatch count.
 */
async function microBatchGradient(
  model: Model,
  p: PackedBatch,
  rows: StepRows,
  out: StepBuffers,
  o: GrpoOptions,
  chunk: number,
  accumulate: boolean,
): Promise<number> {
  const gpu = model.gpu;
  const inp = uploadBatch(gpu, p, model.config.vocabSize);
  const rec = gpu.recorder();
  const ref = o.beta > 0 || p.klWeight.some((w) => w > 0) ? referenceLogprobs(model, rec, p, inp, chunk) : undefined;
  const fwd = policyForward(model, rec, p, inp, chunk, o.recompute);
  const g = lossGradient(gpu, rec, p, inp, fwd.lp, ref, out.totals, o, accumulate);
  keepRows(rec, p, rows, fwd, out);
  const dhN = headBackward(
    model,
    rec,
    fwd.acts.hN,
    inp.targets,
    fwd.lse,
    fwd.ent,
    g.dnew,
    p.N,
    chunk,
    undefined,
    inp.allow,
  );
  gpu.release(fwd.lp, fwd.ent, fwd.lse, g.dnew, g.perToken, g.seqStats);
  // Layer backward: through every layer into the LoRA gradients, freeing the activations as it goes.
  model.backward(rec, fwd.acts, dhN, { B: p.B, T: p.T });
  gpu.release(inp.ids, inp.targets, inp.slotPos, inp.old, inp.meta, inp.allow, ref, dhN);
  const dispatches = rec.dispatches;
  await rec.submit();
  return dispatches;
}

/** Reference logprobs (for the KL term): the sequences' own, or the same model's with the adapter switched off. */
function referenceLogprobs(model: Model, rec: Recorder, p: PackedBatch, inp: BatchInputs, chunk: number): GPUBuffer {
  const gpu = model.gpu;
  if (p.haveRef) return gpu.upload(p.ref, "activations");
  const { N } = p;
  const C = model.config.hiddenSize;
  const lora = model.lora!;
  const ref = gpu.buffer(N * 4, "activations", "ref logprobs");
  lora.enabled = false;
  try {
    const { x } = model.forward(rec, inp.ids, N, { kind: "train", B: p.B, T: p.T, slotPos: inp.slotPos }, false);
    const h = gpu.buffer(N * C * 4, "activations", "ref h");
    const rstd = gpu.buffer(N * 4, "activations", "ref rstd");
    rmsnormForward(
      gpu,
      rec,
      { x, w: model.weights.finalNorm, y: h, rstd },
      { rows: N, C, eps: model.config.rmsNormEps },
      { tuning: model.tuning.rmsnorm },
    );
    const e = gpu.buffer(N * 4, "activations");
    const l = gpu.buffer(N * 4, "activations");
    headLogprobs(model, rec, h, inp.targets, N, ref, e, l, chunk, inp.allow);
    gpu.release(x, h, rstd, e, l);
  } finally {
    lora.enabled = true;
  }
  return ref;
}

/** The policy's forward with LoRA, keeping activations: each row's logprob of its target, entropy and lse. */
interface PolicyForward {
  acts: Activations;
  lp: GPUBuffer; // (N)
  ent: GPUBuffer; // (N)
  lse: GPUBuffer; // (N)
}

function policyForward(
  model: Model,
  rec: Recorder,
  p: PackedBatch,
  inp: BatchInputs,
  chunk: number,
  recompute?: boolean,
): PolicyForward {
  const gpu = model.gpu;
  const { N } = p;
  const attend = { kind: "train", B: p.B, T: p.T, slotPos: inp.slotPos } as const;
  const { acts } = model.forward(rec, inp.ids, N, attend, true, recompute);
  const lp = gpu.buffer(N * 4, "activations", "lp new");
  const ent = gpu.buffer(N * 4, "activations", "entropy");
  const lse = gpu.buffer(N * 4, "activations", "lse");
  headLogprobs(model, rec, acts!.hN, inp.targets, N, lp, ent, lse, chunk, inp.allow);
  return { acts: acts!, lp, ent, lse };
}

/** The GRPO loss on the GPU, added to the totals, and its gradient dnew = dloss/dlp (N). */
function lossGradient(
  gpu: Gpu,
  rec: Recorder,
  p: PackedBatch,
  inp: BatchInputs,
  lp: GPUBuffer,
  ref: GPUBuffer | undefined,
  totals: GPUBuffer,
  o: GrpoOptions,
  accumulate: boolean,
): { dnew: GPUBuffer; perToken: GPUBuffer; seqStats?: GPUBuffer } {
  const { N, B } = p;
  const dnew = gpu.buffer(N * 4, "activations", "dnew");
  const perToken = gpu.buffer(N * 16, "activations", "per token");
  const seqStats = o.level === "sequence" ? gpu.buffer(grpoSeqStatsBytes(B), "activations") : undefined;
  const b = { lpNew: lp, lpOld: inp.old, lpRef: ref ?? null, meta: inp.meta, seqStats, dnew, perToken, totals };
  grpoLoss(
    gpu,
    rec,
    b,
    { N, S: B },
    {
      loss: o.loss,
      level: o.level,
      epsilon: o.epsilon,
      epsilonHigh: o.epsilonHigh,
      beta: ref ? 1 : 0, // the coefficients are in the rows' KL weights
      accumulate,
    },
  );
  return { dnew, perToken, seqStats };
}

/** Copies each real row's entropy (and logprob) into the step's buffers, for the metrics read at the end. */
function keepRows(rec: Recorder, p: PackedBatch, rows: StepRows, fwd: PolicyForward, out: StepBuffers): void {
  p.seqs.forEach((si, b) => {
    const L = p.lengths[b];
    rec.copy(fwd.ent, b * p.T * 4, out.entropyAll, rows.rowOf[si] * 4, L * 4);
    if (out.lpAll) rec.copy(fwd.lp, b * p.T * 4, out.lpAll, rows.rowOf[si] * 4, L * 4);
  });
}

/** Reads the step's totals and per-row entropy (and logprobs) back: the step's metrics. */
async function readMetrics(
  model: Model,
  seqs: TrainSequence[],
  rows: StepRows,
  out: StepBuffers,
  microBatches: number,
  dispatches: number,
): Promise<GradResult & { totals: GPUBuffer; entropyAll: GPUBuffer; maskAll: Float32Array }> {
  const gpu = model.gpu;
  const { total, maskAll, trained, rowOf } = rows;
  const rec = gpu.recorder();
  const tRead = rec.read(out.totals, grpoTotalsBytes);
  const lRead = out.lpAll ? rec.read(out.lpAll, total * 4) : undefined;
  const eRead = rec.read(out.entropyAll, total * 4);
  await rec.submit();
  const t = new Float32Array(await tRead);
  const e = new Float32Array(await eRead);
  let entSum = 0;
  for (let i = 0; i < total; i++) entSum += maskAll[i] * e[i];
  const res: GradResult & { totals: GPUBuffer; entropyAll: GPUBuffer; maskAll: Float32Array } = {
    loss: t[GRPO_TOTALS.loss],
    policyLoss: t[GRPO_TOTALS.policy],
    kl: t[GRPO_TOTALS.kl],
    // The kernel counts anchored rows (KL only, advantage 0: never clipped) as masked; the fraction is of trained tokens.
    clipFraction:
      trained && t[GRPO_TOTALS.masked] > trained ? t[GRPO_TOTALS.clipped] / trained : t[GRPO_TOTALS.clipFraction],
    entropy: trained ? entSum / trained : 0,
    trainedTokens: trained,
    microBatches,
    dispatches,
    totals: out.totals,
    entropyAll: out.entropyAll,
    maskAll,
  };
  if (lRead) {
    const all = new Float32Array(await lRead);
    // Row t holds the logprob of position t + 1: shift to per-position arrays.
    res.newLogprobs = seqs.map((s, i) => {
      const lp = new Float32Array(s.ids.length);
      lp.set(all.subarray(rowOf[i], rowOf[i] + s.ids.length - 1), 1);
      return lp;
    });
    gpu.release(out.lpAll);
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
    { n: lora.size, step },
    { lr: o.lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weightDecay: o.weightDecay, maxNorm: o.maxGradNorm },
  );
  const r = rec.read(stats, adamwStatsBytes);
  gpu.release(parts, stats);
  const dispatches = rec.dispatches;
  lora.version++; // the adapter moves: weights it was merged into are made again
  await rec.submit();
  const s = new Float32Array(await r);
  return { gradNorm: s[0], finite: s[2] !== 0, dispatches };
}
