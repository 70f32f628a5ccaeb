// One LocalBackend training step, in the order it runs: tokenize and pack the trajectories, plan the step's memory,
// update the adapter (gradients, then the optimizer) and gather the step's metrics. Normalisation is train/'s.
import type { Engine } from "../engine.ts";
import { accumulateGradients, optimizerStep, type GradResult, type TrainSequence } from "../train/grpo.ts";
import { planTraining, PlanError } from "../plan.ts";
import type { GroupAdvantages } from "./advantages.ts";
import type { TrainMetrics } from "./backend.ts";
import { tokenizeHistory } from "./tokenize.ts";
import type { TrainConfig } from "./train-config.ts";
import { sampleHistories, type TrajectoryGroup } from "./trajectories.ts";

/** A training sequence of a step, with its trained-token count and where it came from (for errors). */
export type StepSequence = TrainSequence & { n: number; from: string };

/**
 * Tokenize and pack: every trajectory with a non-zero advantage as training sequences (its sampled histories,
 * each tokenized as the sampler saw it), with its advantage; the loss coefficients are set afterwards.
 */
export function stepSequences(
  engine: Engine,
  groups: TrajectoryGroup[],
  adv: GroupAdvantages,
  cfg: TrainConfig,
  step: number,
): { seqs: StepSequence[]; trajectories: number; exceptions: number } {
  const seqs: StepSequence[] = [];
  let trajectories = 0;
  let exceptions = 0;
  groups.forEach((g, gi) => {
    exceptions += g.exceptions.length;
    g.trajectories.forEach((t, ti) => {
      trajectories++;
      if (!t.hasTrainableTurns()) {
        throw new Error(
          `train: trajectory ${ti} of group ${gi} has no trainable assistant turn: it needs Choices returned by this ` +
            `model's openai client (they carry token_ids and token_logprobs), not plain assistant messages`,
        );
      }
      const a = adv.advantages[gi][ti];
      if (a === 0) return;
      const hs = sampleHistories(t.histories(), cfg.maxHistoriesPerTrajectory, step * 1_000_003 + gi * 1009 + ti);
      for (const tk of hs.flatMap((h) => tokenizeHistory(engine.tokenizer, h, { anchors: cfg.anchorContextTurns }))) {
        if (tk.ids.length > engine.runner.maxContext) {
          throw new Error(
            `train: trajectory ${ti} of group ${gi} has ${tk.ids.length} tokens, over the ${engine.runner.maxContext}-token context`,
          );
        }
        const words = Math.ceil(engine.config.vocabSize / 32);
        const wrong = tk.allowed?.find((m) => m && m.length !== words);
        if (wrong) {
          throw new Error(
            `train: trajectory ${ti} of group ${gi} has a token_allowed set of ${wrong.length * 32} tokens, but this ` +
              `model's vocabulary needs ${words * 32} (${engine.config.vocabSize}): its choices came from another model`,
          );
        }
        // A forced reply (SampledChoice.forced) is trained only toward: pushing down a token the policy rarely picks
        // would only sharpen the policy toward its current pick.
        const mask = a < 0 && tk.forced ? tk.mask.map((m, k) => (tk.forced![k] ? 0 : m)) : tk.mask;
        const n = mask === tk.mask ? tk.trainableTokens : mask.reduce((x, m) => x + m, 0);
        if (n === 0) continue;
        seqs.push({
          ids: tk.ids,
          mask,
          oldLogprobs: tk.oldLogprobs,
          anchor: tk.anchor,
          forced: tk.forced,
          allowed: tk.allowed,
          advantage: a,
          coef: 0,
          n,
          from: `trajectory ${ti} of group ${gi}`,
        });
      }
    });
  });
  return { seqs, trajectories, exceptions };
}

/** The planner's micro-batch, recompute and vocabulary chunk for a step, and the bytes it plans to hold. */
export interface StepPlan {
  choice?: ReturnType<typeof planTraining>;
  planned: number;
}

/**
 * The planner decides the micro-batch, recompute and vocabulary chunk for this step's longest sequence, before
 * anything is allocated; a step that cannot fit is refused naming that sequence. No sequences: no plan.
 * `want.newLogprobs` as given to updateAdapter (the step then keeps each token's logprob).
 */
export function planStep(
  engine: Engine,
  seqs: StepSequence[],
  cfg: TrainConfig,
  want: { newLogprobs?: boolean } = {},
): StepPlan {
  const longest = seqs.reduce(
    (m, q) => (q.ids.length > (m?.ids.length ?? 0) ? q : m),
    undefined as StepSequence | undefined,
  );
  if (!longest) return { planned: 0 };
  engine.model.lora!.ensureOptimizer();
  try {
    const choice = planTraining(
      engine.config,
      engine.planSetup,
      { maxStorageBufferBindingSize: engine.gpu.maxStorageBinding, maxBufferSize: engine.gpu.maxBufferSize },
      engine.memoryBudget,
      {
        microBatchTokens: cfg.microBatchTokens,
        longest: longest.ids.length,
        recompute: cfg.recompute === "auto" ? undefined : cfg.recompute === "on",
        held: engine.gpu.pool.stats.liveBytes,
        allowedSets: seqs.some((q) => q.allowed),
        stepTokens: seqs.reduce((n, q) => n + q.ids.length, 0),
        sequences: seqs.length,
        logprobs: want.newLogprobs,
      },
    );
    return { choice, planned: engine.gpu.pool.stats.liveBytes + choice.plan.training };
  } catch (e) {
    if (!(e instanceof PlanError)) throw e;
    throw new PlanError(`train: ${longest.from} has ${longest.ids.length} tokens, and ${e.message}`);
  }
}

/** What a step's update measured: its gradient's metrics, the optimizer's, the peak memory, and when the
 *  gradient (t2) and the optimizer (t3) finished. */
export interface Update {
  grad: Pick<GradResult, "loss" | "policyLoss" | "kl" | "clipFraction" | "entropy" | "trainedTokens" | "newLogprobs">;
  opt: { gradNorm: number; finite: boolean };
  peak: number;
  t2: number;
  t3: number;
}

export const NO_GRADIENT: Update["grad"] = {
  loss: 0,
  policyLoss: 0,
  kl: 0,
  clipFraction: 0,
  entropy: 0,
  trainedTokens: 0,
};

/**
 * Gradients, then the optimizer, with the engine to itself. `moving` is called once the optimizer may change the
 * adapter; whatever the step allocated is given back if it fails. The update counts in the adapter's `updates`
 * (AdamW's bias correction), unless its gradient was not finite (the optimizer then skips it). `want.newLogprobs`
 * also returns each sequence's logprobs before the update.
 */
export async function updateAdapter(
  engine: Engine,
  seqs: TrainSequence[],
  cfg: TrainConfig,
  choice: NonNullable<StepPlan["choice"]>,
  moving: () => void,
  want: { newLogprobs?: boolean } = {},
): Promise<Update> {
  const scope = engine.gpu.scope();
  try {
    return await engine.scheduler.exclusive(async () => {
      // Inference's pooled buffers go back to the device first, so the step has the memory it was planned for.
      const pool = engine.gpu.pool;
      pool.trim();
      pool.resetPeak();
      const grad = await accumulateGradients(
        engine.model,
        seqs,
        {
          loss: cfg.policyLoss,
          level: cfg.importanceSampling,
          epsilon: cfg.epsilon,
          epsilonHigh: cfg.epsilonHigh,
          beta: cfg.beta,
          anchorBeta: cfg.anchorContextTurns ? cfg.anchorBeta || cfg.beta : 0,
          microBatchTokens: choice.microBatchTokens,
          recompute: choice.recompute,
          vocabChunk: choice.vocabChunk,
        },
        want,
      );
      engine.gpu.release(grad.totals, grad.entropyAll); // read already; the caller owns them
      const t2 = performance.now();
      moving();
      const lora = engine.model.lora!;
      const opt = await optimizerStep(
        engine.model,
        {
          lr: cfg.learningRate,
          beta1: cfg.adamBeta1,
          beta2: cfg.adamBeta2,
          eps: cfg.adamEps,
          weightDecay: cfg.weightDecay,
          maxGradNorm: cfg.maxGradNorm,
        },
        lora.updates + 1,
      );
      if (opt.finite) lora.updates++;
      const t3 = performance.now();
      const peak = pool.stats.peakLiveBytes;
      pool.trim();
      return { grad, opt, peak, t2, t3 };
    });
  } catch (e) {
    scope.releaseLive(); // activations and scratch of the micro-batch that failed
    throw e;
  } finally {
    scope.end();
    engine.scheduler.invalidateCache();
  }
}

/** A step's metrics (ART's names): rewards and counts, the loss and optimizer, timings and memory. */
export function stepMetrics(s: {
  step: number;
  groups: TrajectoryGroup[];
  adv: GroupAdvantages;
  batch: ReturnType<typeof stepSequences>;
  plan: StepPlan;
  update: Update;
  skipped: boolean;
  /** When the step started (t0), finished planning (t1) and its checkpoint (t4). */
  times: { t0: number; t1: number; t4: number };
}): TrainMetrics {
  const { step, groups, adv, plan, skipped } = s;
  const { trajectories, exceptions } = s.batch;
  const { t0, t1, t4 } = s.times;
  const { grad, opt, t2, t3 } = s.update;
  const tokensProcessed = s.batch.seqs.reduce((n, q) => n + q.ids.length, 0);
  return {
    step,
    reward: adv.rewardMean,
    reward_std: adv.rewardStd,
    reward_std_dev: adv.meanGroupStd,
    num_groups_submitted: groups.length,
    num_groups_trainable: adv.groupsTrainable,
    num_trajectories: trajectories,
    exception_rate: trajectories + exceptions ? exceptions / (trajectories + exceptions) : 0,
    policy_loss: grad.policyLoss,
    loss: grad.loss,
    kl_div: grad.kl,
    entropy: grad.entropy,
    clip_fraction: grad.clipFraction,
    grad_norm: opt.gradNorm,
    num_tokens_trained: grad.trainedTokens,
    tokens_per_second: t2 > t1 ? tokensProcessed / ((t2 - t1) / 1000) : 0,
    step_seconds: (t4 - t0) / 1000,
    time_tokenize: (t1 - t0) / 1000,
    time_forward_backward: (t2 - t1) / 1000,
    time_optimizer: (t3 - t2) / 1000,
    time_checkpoint: (t4 - t3) / 1000,
    skipped,
    nonfinite_gradients: !opt.finite,
    micro_batch_tokens: plan.choice?.microBatchTokens ?? 0,
    recompute: plan.choice?.recompute ?? false,
    memory_planned_gib: plan.planned / 2 ** 30,
    memory_peak_gib: s.update.peak / 2 ** 30,
  };
}
