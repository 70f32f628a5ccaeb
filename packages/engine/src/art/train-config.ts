// TrainConfig: the stable knobs of a GRPO step, with ART's defaults, validated (unknown keys are an error).

import type { LossType } from "../train/normalize.ts";

export type { LossType };
export type ImportanceSamplingLevel = "token" | "sequence";

export interface TrainConfig {
  /** AdamW learning rate (ART's default). */
  learningRate: number;
  /** Coefficient of the k3 KL penalty against the base model (adapter disabled); 0 skips the reference pass. */
  beta: number;
  /** Lower clip range: ratios below 1 - epsilon are clipped. */
  epsilon: number;
  /** Upper clip range: ratios above 1 + epsilonHigh are clipped (defaults to epsilon). */
  epsilonHigh: number;
  /** Divide advantages by the group's population std (+1e-6). */
  scaleRewards: boolean;
  /** "sequence": each trajectory weighs the same (ART); "token": every token the same; "dr_grpo": sum / (sequences x maxTokens). */
  lossType: LossType;
  /** "ppo": clipped surrogate; "cispo": clipped, detached ratio times logprob. */
  policyLoss: "ppo" | "cispo";
  /** Importance ratio per token, or per sequence (GSPO). */
  importanceSampling: ImportanceSamplingLevel;
  /** Global gradient-norm clip (ART: 0.1). */
  maxGradNorm: number;
  adamBeta1: number;
  adamBeta2: number;
  adamEps: number;
  weightDecay: number;
  /** Tokens per micro-batch (forward + backward at once); gradients accumulate across micro-batches. The memory
   *  planner may use fewer (never fewer than the longest sequence) when this many do not fit the budget. */
  microBatchTokens: number;
  /** Activation recompute (keep only each layer's input, run its forward again in backward): "auto" lets the
   *  memory planner turn it on when the step does not fit otherwise. */
  recompute: "auto" | "on" | "off";
  /** Dr. GRPO's constant length normaliser; 0 uses the longest trajectory in the step. */
  drGrpoMaxTokens: number;
  /**
   * Train on at most this many histories of each trajectory (0: all). For long games kept as one history per
   * move (2048), where every move's prompt is a separate sequence: the last history (the reply that ended the
   * episode) is always kept, the others are a seeded uniform sample, the same on a rerun of the step.
   */
  maxHistoriesPerTrajectory: number;
  /**
   * Hold the assistant turns that sit in a trajectory's context without being sampled by this model (plain
   * assistant messages: a scripted opening such as tic-tac-toe's `start: "decision"`, few-shot turns) to the base
   * model with the KL term: their tokens get the k3 penalty at coefficient anchorBeta (or beta) and no advantage.
   * The policy never samples those positions, so nothing else keeps its adapter from drifting there. Needs beta > 0
   * or anchorBeta > 0, and per-token importance sampling.
   */
  anchorContextTurns: boolean;
  /**
   * The KL coefficient on the anchored context turns (0: beta). With beta 0 it holds them alone, leaving the sampled
   * tokens free of any KL term.
   */
  anchorBeta: number;
}

export const DEFAULT_TRAIN_CONFIG: Readonly<TrainConfig> = Object.freeze({
  learningRate: 5e-6,
  beta: 0,
  epsilon: 0.2,
  epsilonHigh: 0.2,
  scaleRewards: true,
  lossType: "sequence",
  policyLoss: "ppo",
  importanceSampling: "token",
  maxGradNorm: 0.1,
  adamBeta1: 0.9,
  adamBeta2: 0.99,
  adamEps: 1e-8,
  weightDecay: 0.1,
  microBatchTokens: 4096,
  recompute: "auto",
  drGrpoMaxTokens: 0,
  maxHistoriesPerTrajectory: 0,
  anchorContextTurns: false,
  anchorBeta: 0,
});

const CHOICES: Partial<Record<keyof TrainConfig, readonly string[]>> = {
  lossType: ["sequence", "token", "dr_grpo"],
  policyLoss: ["ppo", "cispo"],
  importanceSampling: ["token", "sequence"],
  recompute: ["auto", "on", "off"],
};

/** Defaults overridden by `partial`; throws on unknown keys and out-of-range values, naming them. */
export function resolveTrainConfig(partial: Partial<TrainConfig> = {}): TrainConfig {
  const out: TrainConfig = { ...DEFAULT_TRAIN_CONFIG };
  const explicitHigh = "epsilonHigh" in partial;
  for (const [k, v] of Object.entries(partial)) {
    if (!(k in DEFAULT_TRAIN_CONFIG)) {
      throw new Error(`TrainConfig: unknown key "${k}" (known: ${Object.keys(DEFAULT_TRAIN_CONFIG).join(", ")})`);
    }
    const key = k as keyof TrainConfig;
    const def = DEFAULT_TRAIN_CONFIG[key];
    if (typeof v !== typeof def)
      throw new Error(`TrainConfig.${k}: expected a ${typeof def}, got ${JSON.stringify(v)}`);
    const choices = CHOICES[key];
    if (choices && !choices.includes(v as string)) {
      throw new Error(`TrainConfig.${k}: "${v}" is not one of ${choices.join(", ")}`);
    }
    if (typeof v === "number" && !Number.isFinite(v)) throw new Error(`TrainConfig.${k}: ${v} is not a finite number`);
    (out as unknown as Record<string, unknown>)[k] = v;
  }
  if (!explicitHigh) out.epsilonHigh = out.epsilon;
  const positive: (keyof TrainConfig)[] = ["learningRate", "maxGradNorm", "microBatchTokens", "adamEps"];
  for (const k of positive)
    if (!((out[k] as number) > 0)) throw new Error(`TrainConfig.${k}: must be > 0, got ${out[k]}`);
  if (!Number.isInteger(out.maxHistoriesPerTrajectory))
    throw new Error(
      `TrainConfig.maxHistoriesPerTrajectory: must be a whole number (0: all), got ${out.maxHistoriesPerTrajectory}`,
    );
  for (const k of [
    "beta",
    "anchorBeta",
    "epsilon",
    "epsilonHigh",
    "weightDecay",
    "drGrpoMaxTokens",
    "maxHistoriesPerTrajectory",
  ] as const)
    if (out[k] < 0) throw new Error(`TrainConfig.${k}: must be >= 0, got ${out[k]}`);
  if (out.anchorContextTurns && !(out.beta > 0) && !(out.anchorBeta > 0))
    throw new Error(
      `TrainConfig.anchorContextTurns: the context turns are held by the KL term, which beta ${out.beta} and anchorBeta ${out.anchorBeta} switch off: set either > 0`,
    );
  if (out.anchorContextTurns && out.importanceSampling !== "token")
    throw new Error(
      `TrainConfig.anchorContextTurns: needs importanceSampling "token", got "${out.importanceSampling}"`,
    );
  for (const k of ["adamBeta1", "adamBeta2"] as const)
    if (!(out[k] >= 0 && out[k] < 1)) throw new Error(`TrainConfig.${k}: must be in [0, 1), got ${out[k]}`);
  return out;
}
