// What a TrainableModel needs from where it runs: LocalBackend (WebGPU in this process or worker) and
// RemoteBackend (HTTP to `webart serve`) implement the same interface.
import type OpenAI from "openai";
import type { TrainConfig } from "./train-config.ts";
import type { TrajectoryGroup } from "./trajectories.ts";
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

export interface TrainResult {
  step: number;
  metrics: TrainMetrics;
}

export interface Backend {
  register(model: ModelSpec): Promise<{ step: number }>;
  /** An openai client serving the model's current adapter under its name. */
  openaiClient(model: ModelSpec): OpenAI;
  getStep(model: ModelSpec): Promise<number>;
  train(model: ModelSpec, groups: TrajectoryGroup[], config?: Partial<TrainConfig>): Promise<TrainResult>;
  log(model: ModelSpec, groups: TrajectoryGroup[], split: string, metrics?: Record<string, number>): Promise<void>;
  listCheckpoints(model: ModelSpec): Promise<number[]>;
  deleteCheckpoints(model: ModelSpec, steps: number[]): Promise<void>;
  history(model: ModelSpec): Promise<Record<string, unknown>[]>;
  /** The PEFT adapter files of a checkpoint (latest when step is omitted). */
  adapterFiles(model: ModelSpec, step?: number): Promise<{ step: number; files: Record<string, Uint8Array> }>;
  close?(): Promise<void>;
}
