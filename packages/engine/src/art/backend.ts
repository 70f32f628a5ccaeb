// What a TrainableModel needs from where it runs: LocalBackend (WebGPU in this process or worker) and
// RemoteBackend (HTTP to `webart serve`) implement the same interface.
import type OpenAI from "openai";
import type { TrainConfig } from "./train-config.ts";
import type { TrajectoryGroup, TrajectoryLike } from "./trajectories.ts";
import type { SftMetrics, TrainSftConfig } from "./train-sft.ts";
import type { LoraConfig } from "../model/lora.ts";

export interface ModelSpec {
  name: string;
  project: string;
  baseModel: string;
  lora: LoraConfig;
  /** Seed for the adapter's initialisation. */
  seed: number;
}

export interface TrainMetrics {
  step: number;
  reward: number;
  reward_std: number;
  /** Mean within-group std of rewards (ART's reward_std_dev). */
  reward_std_dev: number;
  num_groups_submitted: number;
  num_groups_trainable: number;
  num_trajectories: number;
  exception_rate: number;
  policy_loss: number;
  loss: number;
  kl_div: number;
  entropy: number;
  clip_fraction: number;
  grad_norm: number;
  num_tokens_trained: number;
  tokens_per_second: number;
  step_seconds: number;
  /** Seconds in each phase of the step. */
  time_tokenize: number;
  time_forward_backward: number;
  time_optimizer: number;
  time_checkpoint: number;
  /** True when nothing was trainable (the step still advanced). */
  skipped: boolean;
  /** What the memory planner chose for the step, the peak it planned and the peak the pool measured. */
  micro_batch_tokens: number;
  recompute: boolean;
  memory_planned_gib: number;
  memory_peak_gib: number;
  [k: string]: number | boolean;
}

/** What a training step returns (ART's TrainResult): the new step, its metrics and where its checkpoint is. */
export interface TrainResult {
  step: number;
  metrics: TrainMetrics;
  /** The checkpoint folder of `step` (PEFT adapter + optimizer): a path on the machine that trained, or the
   *  store key in a browser. */
  checkpointPath: string;
}

/** What a supervised fine-tuning call returns: the new step, its metrics and where its checkpoint is. */
export interface TrainSftResult {
  step: number;
  metrics: SftMetrics;
  checkpointPath: string;
}

/** A model as backend methods take it: a TrainableModel (or anything carrying its spec), or the spec itself. */
export type ModelRef = ModelSpec | { readonly spec: ModelSpec };

/** Who `log` records for: a trainable model, or any named model (a prompted baseline, ART's art.Model). */
export type LogTarget = ModelRef | { readonly name: string; readonly project: string };

export const specOf = (m: ModelRef): ModelSpec => ("spec" in m ? m.spec : m);

/** A log target's name and project, and its spec when it is a trainable model. */
export function logTargetOf(m: LogTarget): { name: string; project: string; spec?: ModelSpec } {
  const who = "spec" in m ? m.spec : m;
  return { name: who.name, project: who.project, spec: "baseModel" in who ? (who as ModelSpec) : undefined };
}

export interface Backend {
  register(model: ModelSpec): Promise<{ step: number }>;
  /** An openai client serving the model's current adapter under its name. */
  openaiClient(model: ModelSpec): OpenAI;
  getStep(model: ModelSpec): Promise<number>;
  /** One GRPO step on the groups (ART's backend.train); writes the step's trajectories, history row and checkpoint. */
  train(model: ModelRef, groups: TrajectoryGroup[], config?: Partial<TrainConfig>): Promise<TrainResult>;
  /**
   * Supervised fine-tuning on whole conversations (ART's train_sft): cross-entropy on their assistant turns, an
   * optimizer update a batch of trajectories, then one checkpoint at the next step; a history row of `train/sft_*`.
   */
  trainSft(
    model: ModelRef,
    trajectories: Iterable<TrajectoryLike>,
    config?: Partial<TrainSftConfig>,
  ): Promise<TrainSftResult>;
  /** Records groups and metrics under a split at a step (default: the model's current step, 0 if it does not train). */
  log(
    model: LogTarget,
    groups: TrajectoryGroup[],
    opts?: { split?: string; metrics?: Record<string, number>; step?: number },
  ): Promise<void>;
  listCheckpoints(model: ModelSpec): Promise<number[]>;
  deleteCheckpoints(model: ModelSpec, steps: number[]): Promise<void>;
  history(model: ModelSpec): Promise<Record<string, unknown>[]>;
  /** The PEFT adapter files of a checkpoint (latest when step is omitted). */
  adapterFiles(model: ModelSpec, step?: number): Promise<{ step: number; files: Record<string, Uint8Array> }>;
  close?(): Promise<void>;
}
