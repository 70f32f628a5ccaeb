// Supervised fine-tuning of the adapter on whole conversations (ART's model.train_sft): cross-entropy on the
// assistant turns, in batches of trajectories, one optimizer update a batch, one checkpoint a call. The gradient
// is the GRPO step's own path with every trained token at advantage 1 and ratio 1 (no old logprobs), whose
// gradient is that of the mean negative log-likelihood: -Σ ∇logp / N over the batch's N trained tokens.
import type { Engine } from "../engine.ts";
import { lossCoefficients } from "../train/normalize.ts";
import { tokenizeSft, type SftTurns } from "./tokenize.ts";
import { resolveTrainConfig, type TrainConfig } from "./train-config.ts";
import { planStep, updateAdapter, type StepSequence } from "./train-step.ts";
import { Trajectory, type TrajectoryLike } from "./trajectories.ts";

export interface TrainSftConfig {
  /** AdamW's learning rate: one for every batch, or one per batch (as many as there are batches). */
  learningRate: number | number[];
  /** Trajectories per batch (one optimizer update each); "auto": 8. */
  batchSize: number | "auto";
  /** Which assistant turns are trained: every one, or each conversation's last. */
  assistantTurns: SftTurns;
  /** Global gradient-norm clip of each update. */
  maxGradNorm: number;
  /** AdamW's weight decay. */
  weightDecay: number;
}

export const DEFAULT_SFT_CONFIG: Readonly<TrainSftConfig> = Object.freeze({
  learningRate: 5e-5,
  batchSize: "auto",
  assistantTurns: "all",
  maxGradNorm: 1,
  weightDecay: 0,
});

/** The batch size "auto" stands for. */
export const SFT_AUTO_BATCH = 8;

/** Defaults overridden by `partial`; throws on unknown keys and bad values, naming them. */
export function resolveSftConfig(partial: Partial<TrainSftConfig> = {}): TrainSftConfig {
  const out: TrainSftConfig = { ...DEFAULT_SFT_CONFIG };
  for (const [k, v] of Object.entries(partial)) {
    if (!(k in DEFAULT_SFT_CONFIG))
      throw new Error(`TrainSftConfig: unknown key "${k}" (known: ${Object.keys(DEFAULT_SFT_CONFIG).join(", ")})`);
    (out as unknown as Record<string, unknown>)[k] = v;
  }
  const lrs = Array.isArray(out.learningRate) ? out.learningRate : [out.learningRate];
  if (!lrs.length || !lrs.every((x) => typeof x === "number" && Number.isFinite(x) && x > 0))
    throw new Error(
      `TrainSftConfig.learningRate: expected a number > 0 or a list of them, got ${JSON.stringify(out.learningRate)}`,
    );
  if (out.batchSize !== "auto" && !(Number.isInteger(out.batchSize) && out.batchSize >= 1))
    throw new Error(
      `TrainSftConfig.batchSize: expected a whole number >= 1 or "auto", got ${JSON.stringify(out.batchSize)}`,
    );
  if (out.assistantTurns !== "all" && out.assistantTurns !== "last")
    throw new Error(`TrainSftConfig.assistantTurns: "${String(out.assistantTurns)}" is not one of all, last`);
  if (!(typeof out.maxGradNorm === "number" && out.maxGradNorm > 0))
    throw new Error(`TrainSftConfig.maxGradNorm: must be > 0, got ${JSON.stringify(out.maxGradNorm)}`);
  if (!(typeof out.weightDecay === "number" && out.weightDecay >= 0))
    throw new Error(`TrainSftConfig.weightDecay: must be >= 0, got ${JSON.stringify(out.weightDecay)}`);
  return out;
}

/** What a supervised call measured (the history row writes each as `train/{name}`). */
export interface SftMetrics {
  step: number;
  /** Mean negative log-likelihood of the trained tokens under the adapter each batch met (before its update). */
  loss: number;
  /** The same, per batch. */
  batch_losses: number[];
  /** Mean global gradient norm of the updates (before clipping). */
  grad_norm: number;
  num_batches: number;
  num_trajectories: number;
  num_sequences: number;
  num_tokens_trained: number;
  learning_rate: number;
  tokens_per_second: number;
  step_seconds: number;
  time_tokenize: number;
  time_checkpoint: number;
  /** False when an update met a gradient that was not finite (that update was skipped). */
  finite: boolean;
  micro_batch_tokens: number;
  memory_peak_gib: number;
}

/** The tokenized batches of a supervised call, each with its learning rate. */
export interface SftBatches {
  batches: { seqs: StepSequence[]; lr: number; trajectories: number }[];
  trajectories: number;
}

/**
 * Tokenizes the trajectories (every history: the main one and additionalHistories) and splits them into batches
 * in their order. Refuses a trajectory with no assistant turn, a sequence over the context, and a learning-rate
 * list whose length is not the number of batches.
 */
export function sftBatches(engine: Engine, trajectories: TrajectoryLike[], cfg: TrainSftConfig): SftBatches {
  const ts = trajectories.map((t) => (t instanceof Trajectory ? t : new Trajectory(t)));
  if (!ts.length) throw new Error("trainSft: no trajectories given");
  const size = cfg.batchSize === "auto" ? SFT_AUTO_BATCH : cfg.batchSize;
  const n = Math.ceil(ts.length / size);
  const lrs = Array.isArray(cfg.learningRate) ? cfg.learningRate : new Array<number>(n).fill(cfg.learningRate);
  if (lrs.length !== n)
    throw new Error(
      `TrainSftConfig.learningRate: ${lrs.length} learning rates for ${n} batches (${ts.length} trajectories in ` +
        `batches of ${size}); give one per batch, or a single number`,
    );
  const batches: SftBatches["batches"] = [];
  for (let b = 0; b < n; b++) {
    const seqs: StepSequence[] = [];
    const part = ts.slice(b * size, (b + 1) * size);
    part.forEach((t, i) => {
      const ti = b * size + i;
      const from = `trajectory ${ti}`;
      const got = t
        .histories()
        .flatMap((h, hi) =>
          tokenizeSft(
            engine.tokenizer,
            h,
            cfg.assistantTurns,
            engine.tokenizer.stopTokenIds,
            `trainSft: ${from}${hi ? `, history ${hi}` : ""}`,
          ),
        );
      // Every sequence holds a trained turn: none means the trajectory has no assistant turn to train.
      if (!got.length)
        throw new Error(`trainSft: ${from} has no assistant turn to learn from (messages with role "assistant")`);
      for (const s of got) {
        if (s.ids.length > engine.runner.maxContext)
          throw new Error(
            `trainSft: ${from} has ${s.ids.length} tokens, over the ${engine.runner.maxContext}-token context`,
          );
        const old = new Float32Array(s.ids.length).fill(NaN); // ratio 1: the gradient of logp itself
        seqs.push({ ids: s.ids, mask: s.mask, oldLogprobs: old, advantage: 1, coef: 0, n: s.trainableTokens, from });
      }
    });
    // Every trained token of the batch weighs the same: the loss is the batch's mean negative log-likelihood.
    const coefs = lossCoefficients(
      seqs.map((s) => s.n),
      "token",
    );
    seqs.forEach((s, i) => (s.coef = coefs[i]));
    batches.push({ seqs, lr: lrs[b], trajectories: part.length });
  }
  return { batches, trajectories: ts.length };
}

/** The GRPO step's knobs that make its gradient the supervised one, with this call's optimizer settings. */
function stepConfig(cfg: TrainSftConfig, lr: number): TrainConfig {
  return resolveTrainConfig({
    learningRate: lr,
    beta: 0,
    lossType: "token",
    policyLoss: "ppo",
    importanceSampling: "token",
    maxGradNorm: cfg.maxGradNorm,
    weightDecay: cfg.weightDecay,
  });
}

/**
 * The batches' updates, in order, with the engine's adapter: plan, gradient (with each sequence's logprobs, for the
 * loss), optimizer. `moving` is called once the adapter may change.
 */
export async function sftUpdates(
  engine: Engine,
  b: SftBatches,
  cfg: TrainSftConfig,
  moving: () => void,
): Promise<{
  /** The mean over every trained token of the call: each batch's loss weighted by its tokens. */
  loss: number;
  losses: number[];
  gradNorms: number[];
  tokens: number;
  finite: boolean;
  microBatch: number;
  peak: number;
}> {
  const losses: number[] = [];
  const gradNorms: number[] = [];
  let tokens = 0;
  let nllSum = 0;
  let finite = true;
  let microBatch = 0;
  let peak = 0;
  for (const batch of b.batches) {
    const sc = stepConfig(cfg, batch.lr);
    const want = { newLogprobs: true }; // each batch's loss is read from its tokens' logprobs
    const plan = planStep(engine, batch.seqs, sc, want);
    const u = await updateAdapter(engine, batch.seqs, sc, plan.choice!, moving, want);
    let nll = 0;
    batch.seqs.forEach((s, i) => {
      const lp = u.grad.newLogprobs![i];
      for (let t = 0; t < s.ids.length; t++) if (s.mask[t]) nll -= lp[t];
    });
    const n = batch.seqs.reduce((a, s) => a + s.n, 0);
    losses.push(nll / n);
    nllSum += nll;
    gradNorms.push(u.opt.gradNorm);
    tokens += n;
    finite &&= u.opt.finite;
    microBatch = Math.max(microBatch, plan.choice!.microBatchTokens);
    peak = Math.max(peak, u.peak);
  }
  return { loss: nllSum / tokens, losses, gradNorms, tokens, finite, microBatch, peak };
}
