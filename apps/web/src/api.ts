// The typed contract between the page and the engine worker: what the worker exposes through comlink, the
// events it pushes back, and the plain data (settings, runs, steps, trajectories) both sides pass around.
import type { DeviceKind, SpeedReport } from "webart/engine";
import type { CustomScenario } from "webart/envs";

import type { MessageView } from "./lib/messages.ts";

export type { MessageView, ToolCallView } from "./lib/messages.ts";

export type EnvName = "tictactoe" | "2048" | "email" | "custom";

/** Environment score, RULER (an LLM judge behind any OpenAI-compatible endpoint), or RULER with the loaded model
 *  itself as the judge. */
export type RewardSettings =
  | { kind: "env" }
  | { kind: "self" }
  | {
      kind: "ruler";
      baseURL: string;
      model: string;
      /** Kept in memory only; never written to a run's files. */
      apiKey: string;
    };

/** A task of the user's own (env "custom"): scored by RULER only. */
export interface CustomTaskSettings {
  systemPrompt: string;
  /** Every scenario; the validation ones are split off from these with the run's seed (splitScenarios). */
  scenarios: CustomScenario[];
  /** Empty: RULER's default rubric. */
  rubric: string;
  /** Assistant turns per conversation (1: single-turn). */
  turns: number;
  /** The simulated user's instructions (multi-turn). */
  userPrompt: string;
  /** Validation every this many steps (and at the last step). */
  valEvery: number;
  /** Supervised passes over the training scenarios' `answer` field before GRPO, a step each. Runs saved before this
   *  setting lack it: 0. */
  warmStartEpochs?: number;
}

export interface TrainSettings {
  env: EnvName;
  /** The task when env is "custom". */
  custom?: CustomTaskSettings;
  /** Total steps the run trains to. */
  steps: number;
  /** Rollouts per group (same scenario); advantages are relative within a group. */
  groupSize: number;
  groupsPerStep: number;
  /** Dynamic sampling: at most this many groups drawn a step, more while fewer than groupsPerStep have rewards
   *  that differ. Runs saved before this setting lack it: groupsPerStep, none more. */
  maxGroups?: number;
  learningRate: number;
  /** KL penalty toward the base model; it also holds the turns the model does not sample (a decision start's
   *  opening). Runs saved before this setting lack it: 0. */
  beta?: number;
  loraRank: number;
  seed: number;
  /** Tokens the model may write per move. */
  maxTokens: number;
  temperature: number;
  /** Tic-tac-toe opponents, one per group in turn ("random,winning"); runs saved before this setting play random. */
  opponents?: string;
  /** Where tic-tac-toe games start, one per group in turn ("empty,decision"); runs saved before this setting start empty. */
  starts?: string;
  /** Tic-tac-toe's reward for the decisions themselves (wins taken, threats blocked); runs saved before this setting
   *  lack it: 0, the outcome alone. */
  decisionReward?: number;
  /** Tic-tac-toe's exploration: the chance a training move is a random empty cell, asked of the model through
   *  guided_choice; runs saved before this setting lack it: 0, none. */
  explore?: number;
  /** Tic-tac-toe: each training move sampled among the legal ones (a guided_choice of the empty cells) and trained
   *  over them; runs saved before this setting lack it: false. */
  legalMoves?: boolean;
  /** Email: "required" forces a tool call every turn, constrained to a tool's schema, "guided" also limits its
   *  values to what the episode has shown; runs saved before this setting lack it: "auto", the model's choice. */
  toolChoice?: "auto" | "required" | "guided";
  /** GiB of GPU memory the run's engine may plan for; a plan over it is refused before loading. Runs saved
   *  before this setting lack it and get the engine's browser default. */
  memoryBudgetGiB?: number;
  /** The base model's weights as 4-bit ones (EngineOptions.quantize "q4"); runs saved before this setting
   *  lack it: the model's own weights. */
  quantize?: "q4";
  reward: RewardSettings;
}

/** Where the base model comes from. */
export type ModelChoice =
  /** A model inside the app: webart-tiny (no name) or webart-tools, the email agent's. */
  | { kind: "embedded"; name?: "webart-tools" }
  | { kind: "url"; url: string }
  | { kind: "hub"; repo: string }
  /** Files picked on this machine, copied into the browser's model cache under `id`. */
  | { kind: "local"; id: string; label: string };

export interface DeviceInfo extends DeviceKind {
  features: string[];
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  /** Where the engine runs: "worker" inside a Web Worker. */
  context: string;
}

/** A model's config and memory plan, before anything is loaded on the GPU. */
export interface ModelInfo {
  /** The base-model string runs record (URL path, URL, repo id or local-cache URL). */
  baseModel: string;
  label: string;
  architecture: string;
  layers: number;
  hidden: number;
  vocab: number;
  dtype: string;
  /** Human-readable plan lines (weights, LoRA, optimizer, KV cache, the training step chosen, ...); empty when
   *  refused (the reason holds the plan of the smallest step tried). */
  plan: string[];
  /** The plan's total, null when refused. */
  totalBytes: number | null;
  /** The memory budget the plan was checked against. */
  budgetBytes: number;
  fits: boolean;
  /** Why the plan is refused (its largest parts, the budget and what to change), when it does not fit. */
  reason?: string;
}

/** One training step as the charts need it. */
export interface StepRow {
  step: number;
  reward: number;
  rewardStd: number;
  loss: number;
  policyLoss: number;
  kl: number;
  entropy: number;
  gradNorm: number;
  tokensPerSecond: number;
  stepSeconds: number;
  skipped: boolean;
  /** tic-tac-toe: fraction of games won; 2048: games reaching the winning tile. */
  win?: number;
  /** 2048: mean largest tile. */
  maxTile?: number;
  /** Email search: answers right (email and answer), episodes ended by a malformed reply, and mean turns. */
  accuracy?: number;
  malformed?: number;
  turns?: number;
  /** Custom task, at validation steps: the judge's mean score of the base model and of the checkpoint. */
  valBase?: number;
  valModel?: number;
}

export interface RunSummary {
  name: string;
  project: string;
  baseModel: string;
  model: ModelChoice;
  env: EnvName;
  /** Latest complete checkpoint. */
  step: number;
  /** Steps the run trains to. */
  target: number;
  settings: TrainSettings;
  createdAt: string;
  lastReward: number | null;
  /** Set for runs made by importing a PEFT adapter. */
  importedFrom?: string;
}

export type Phase = "loading" | "rollouts" | "training" | "saving" | "validating";
export type RunState = "running" | "paused" | "stopped" | "done" | "failed";

/** Why a run stopped on its own, so the page can say what to do. */
export type FailureKind = "device-lost" | "storage-full" | "webgpu-missing" | "other";

export interface SerializedError {
  name: string;
  message: string;
  stack?: string;
}

export type EngineEvent =
  | { type: "phase"; run: string; phase: Phase; step: number; done?: number; total?: number }
  | { type: "load"; stage: "download" | "weights" | "copy"; file: string; bytesDone: number; bytesTotal: number }
  /** etaSeconds: the run's remaining time, from the recent steps' wall time. */
  | { type: "step"; run: string; row: StepRow; target: number; etaSeconds: number }
  | { type: "state"; run: string; state: RunState; step: number; failure?: FailureKind; error?: SerializedError }
  | { type: "notice"; message: string };

export interface TrajectoryView {
  reward: number;
  advantage: number;
  metrics: Record<string, number | boolean>;
  metadata: Record<string, string | number | boolean | null>;
  logs: string[];
  /** The main conversation: role and text of each message (assistant turns from the sampled choices), with the
   *  tool calls and tool results of an agent with tools. */
  messages: MessageView[];
  /** 2048 keeps each move as its own short history; these are their messages, in order. */
  extraHistories: MessageView[][];
}

/** One email episode played from the Play tab. */
export interface EmailPlayResult {
  messages: MessageView[];
  /** The inbox's own question is graded as in training; a question of the person's own is not (null). */
  graded: { correct: boolean; rightMessage: boolean; reward: number } | null;
  turns: number;
  /** Why the episode ended without an answer (a malformed reply, the turn limit, a full context), or null. */
  ending: string | null;
}

export interface GroupView {
  trajectories: TrajectoryView[];
  exceptions: string[];
}

export interface StorageInfo {
  usage: number;
  quota: number;
}

/** What the engine worker exposes. Every method is async across the worker boundary. */
export interface EngineApi {
  device(): Promise<DeviceInfo>;
  /** Receives progress, steps and state changes (a comlink proxy of a page function). */
  listen(cb: (e: EngineEvent) => void): Promise<void>;
  inspectModel(model: ModelChoice, settings: TrainSettings): Promise<ModelInfo>;
  /** Copies picked files (or a folder handle) into the model cache; returns the choice that loads them. */
  addLocalModel(files: File[] | FileSystemDirectoryHandle, label: string): Promise<ModelChoice>;
  listRuns(): Promise<RunSummary[]>;
  history(run: string): Promise<StepRow[]>;
  /** Creates a run and trains it; resolves when it pauses, stops, finishes or fails (see its state event). */
  train(args: { name: string; model: ModelChoice; settings: TrainSettings }): Promise<RunState>;
  /** Continues a saved run from its latest checkpoint (the API key is passed again, never stored). */
  resume(run: string, opts?: { apiKey?: string }): Promise<RunState>;
  /** Finish the current step, then pause. */
  pause(): Promise<void>;
  /** Drop the step in progress (nothing of it is saved) and stop as soon as possible. */
  stop(): Promise<void>;
  deleteRun(run: string): Promise<void>;
  trajectorySteps(run: string): Promise<number[]>;
  trajectories(run: string, step: number): Promise<GroupView[]>;
  exportAdapter(run: string): Promise<{ fileName: string; bytes: Uint8Array }>;
  /** A new run at step 0 holding the zip's PEFT adapter, on `model`, with `settings` for further training. */
  importAdapter(zip: Uint8Array, fileName: string, model: ModelChoice, settings: TrainSettings): Promise<RunSummary>;
  /** The model's reply to a conversation, with the run's latest adapter (or with the adapter off: `base`). */
  reply(
    run: string,
    messages: { role: "system" | "user" | "assistant"; content: string }[],
    maxTokens: number,
    opts?: { base?: boolean },
  ): Promise<string>;
  /** Before a run: asks the settings' RULER judge once, as a step will (or, for the loaded model as its own judge,
   *  checks that RULER's prompt fits its context); for the email agent, checks that its first turn fits the model's
   *  context. Resolves with why the run cannot start, or null. */
  checkRun(settings: TrainSettings, model: ModelChoice): Promise<string | null>;
  /** An email episode on held-out inbox `index`: the run's checkpoint (or the base model) answers `question`. */
  askEmail(run: string, index: number, question: string, opts?: { base?: boolean }): Promise<EmailPlayResult>;
  /** Every saved group of a run, one JSON line each with its split and step (ART's trajectory shape). */
  exportTrajectories(run: string): Promise<{ fileName: string; text: string }>;
  storage(): Promise<StorageInfo>;
  clearModelCache(): Promise<void>;
  /** Testing aid: destroys the GPU device, as a driver reset would. */
  loseDevice(): Promise<void>;
  /** How fast the run's model runs on this GPU (measureSpeed): peak, prefill, decode, kernel choices. Refused while
   *  a run trains. */
  speed(run: string): Promise<SpeedReport>;
  /** Before any run: how fast a base model runs and trains here, loaded as a run with these settings would load it,
   *  with a fresh adapter and a GRPO step (the open run is unloaded first). Refused while a run trains. */
  speedOfModel(model: ModelChoice, settings: TrainSettings): Promise<SpeedReport>;
}
