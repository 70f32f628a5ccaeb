// Model and TrainableModel: ART's user-facing handles. A Model is any OpenAI-compatible endpoint (a prompted
// baseline, a judge); a TrainableModel is registered with a backend, rolls out through its openai client, trains on
// trajectory groups, logs evaluations and prunes checkpoints.
import OpenAI from "openai";
import type { Backend, ModelSpec, TrainResult, TrainSftResult } from "./backend.ts";
import type { TrainSftConfig } from "./train-sft.ts";
import type { TrainConfig } from "./train-config.ts";
import type { TrajectoryGroup, TrajectoryLike } from "./trajectories.ts";
import { DEFAULT_LORA, validateLoraConfig, type LoraConfig } from "../model/lora.ts";

export interface ModelInit {
  name: string;
  /** Groups runs on disk (`.art/{project}/models/{name}/`); needed only to log. Default "default". */
  project?: string;
  /** The endpoint, e.g. "https://api.openai.com/v1" or "http://127.0.0.1:11434/v1" (ART's inference_base_url). */
  baseURL?: string;
  /** Its key (ART's inference_api_key); default OPENAI_API_KEY, and "none" when neither is set. */
  apiKey?: string;
  /** The model's name at the endpoint when it differs from `name` (ART's inference_model_name). */
  inferenceName?: string;
  /** Options for the `openai` client (timeout, maxRetries, fetch, defaultHeaders, ...). */
  clientOptions?: Omit<ConstructorParameters<typeof OpenAI>[0] & object, "baseURL" | "apiKey">;
}

export interface LogOptions {
  /** Default "val". */
  split?: string;
  /** Extra metrics for the history row, written as `{split}/{name}`. */
  metrics?: Record<string, number>;
  /** The step to record at (default: the model's current step; 0 for a model that does not train). */
  step?: number;
}

const MODEL_KEYS = ["name", "project", "baseURL", "apiKey", "inferenceName", "clientOptions"];

const envKey = () =>
  (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.OPENAI_API_KEY;

/** A model that is not trained here: any OpenAI-compatible endpoint, for prompted baselines and judges. */
export class Model {
  readonly name: string;
  readonly project: string;
  readonly trainable: boolean = false;
  readonly baseURL?: string;
  readonly inferenceName?: string;
  private readonly apiKey?: string;
  private readonly clientOptions: ModelInit["clientOptions"];
  private client?: OpenAI;
  protected backend?: Backend;

  constructor(init: ModelInit, allowed: string[] = MODEL_KEYS) {
    for (const k of Object.keys(init))
      if (!allowed.includes(k)) throw new Error(`${this.constructor.name}: unknown option "${k}"`);
    if (typeof init.name !== "string" || !init.name) throw new Error(`${this.constructor.name}: name is required`);
    this.name = init.name;
    this.project = init.project ?? "default";
    this.baseURL = init.baseURL;
    this.apiKey = init.apiKey;
    this.inferenceName = init.inferenceName;
    this.clientOptions = init.clientOptions;
  }

  /** Lets `log` record this model's trajectories and metrics in the backend's runs (ART's register). */
  async register(backend: Backend): Promise<void> {
    this.backend = backend;
  }

  protected need(): Backend {
    if (!this.backend) throw new Error(`${this.constructor.name} "${this.name}": call register(backend) first`);
    return this.backend;
  }

  /** An `openai` client for the endpoint (one per model; 20-minute timeout as in ART). */
  openaiClient(): OpenAI {
    if (this.baseURL === undefined)
      throw new Error(`Model "${this.name}": baseURL is not set; pass the endpoint, e.g. "https://api.openai.com/v1"`);
    return (this.client ??= new OpenAI({
      timeout: 20 * 60 * 1000,
      dangerouslyAllowBrowser: true,
      ...this.clientOptions,
      baseURL: this.baseURL,
      apiKey: this.apiKey ?? envKey() ?? "none",
    }));
  }

  /** The name to put in chat.completions requests. */
  getInferenceName(): string {
    return this.inferenceName ?? this.name;
  }

  /**
   * Records groups (e.g. an evaluation) and their reward metrics under a split ("val" by default) at `step`,
   * where the run's trajectories and history.jsonl are; `groups` null (or empty) records only `metrics`.
   */
  async log(groups: TrajectoryGroup[] | null, opts: LogOptions = {}): Promise<void> {
    for (const k of Object.keys(opts))
      if (!["split", "metrics", "step"].includes(k)) throw new Error(`log: unknown option "${k}"`);
    return this.need().log(this, groups ?? [], opts);
  }
}

export interface TrainableModelInit {
  name: string;
  project: string;
  /** A Hugging Face repo id, a URL or a local folder. */
  baseModel: string;
  lora?: Partial<LoraConfig>;
  seed?: number;
}

/** A model trained by its backend; its client serves the latest checkpoint. */
export class TrainableModel extends Model {
  override readonly trainable = true;
  readonly spec: ModelSpec;

  constructor(init: TrainableModelInit) {
    super(init as ModelInit, ["name", "project", "baseModel", "lora", "seed"]);
    this.spec = {
      name: init.name,
      project: init.project,
      baseModel: init.baseModel,
      lora: validateLoraConfig({ ...DEFAULT_LORA, ...init.lora }),
      seed: init.seed ?? 0,
    };
  }

  get baseModel(): string {
    return this.spec.baseModel;
  }

  /** Loads the base model with this adapter (resuming at the latest checkpoint when there is one). */
  override async register(backend: Backend): Promise<void> {
    await backend.register(this.spec);
    this.backend = backend;
  }

  /** A client serving this model's current adapter under its name. */
  override openaiClient(): OpenAI {
    return this.need().openaiClient(this.spec);
  }

  override getInferenceName(): string {
    return this.name;
  }

  getStep(): Promise<number> {
    return this.need().getStep(this.spec);
  }

  /** One training step; the same as `backend.train(model, groups, config)`. */
  train(groups: TrajectoryGroup[], config: Partial<TrainConfig> = {}): Promise<TrainResult> {
    return this.need().train(this, groups, config);
  }

  /**
   * Supervised fine-tuning on whole conversations (ART's train_sft), e.g. to warm-start from expert transcripts
   * before GRPO: cross-entropy on every assistant turn (`assistantTurns: "last"`: each conversation's last),
   * Choices and plain assistant messages alike; one optimizer update per batch of `batchSize` trajectories, at
   * `learningRate` (or one rate per batch); then one checkpoint at the next step.
   */
  trainSft(trajectories: Iterable<TrajectoryLike>, config: Partial<TrainSftConfig> = {}): Promise<TrainSftResult> {
    return this.need().trainSft(this, trajectories, config);
  }

  /** Deletes every checkpoint but the latest and the best by `metric` (history's per-step value; higher is better). */
  async deleteCheckpoints(opts: { metric?: string } = {}): Promise<number[]> {
    const b = this.need();
    const metric = opts.metric ?? "val/reward";
    const steps = await b.listCheckpoints(this.spec);
    if (steps.length <= 1) return [];
    const latest = steps[steps.length - 1];
    const byStep = new Map<number, number>();
    for (const row of await b.history(this.spec)) {
      const v = row[metric];
      if (typeof v === "number" && typeof row.step === "number") byStep.set(row.step, v);
    }
    let best: number | undefined;
    for (const s of steps) if (byStep.has(s) && (best === undefined || byStep.get(s)! > byStep.get(best)!)) best = s;
    const drop = steps.filter((s) => s !== latest && s !== best);
    await b.deleteCheckpoints(this.spec, drop);
    return drop;
  }
}
