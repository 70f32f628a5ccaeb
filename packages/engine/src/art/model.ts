// TrainableModel: ART's user-facing handle. Register it with a backend, roll out through its openai
// client, train on trajectory groups, log evaluations, prune checkpoints.
import type OpenAI from "openai";
import type { Backend, ModelSpec, TrainResult } from "./backend.ts";
import type { TrainConfig } from "./train-config.ts";
import type { TrajectoryGroup } from "./trajectories.ts";
import { DEFAULT_LORA, validateLoraConfig, type LoraConfig } from "../model/lora.ts";

export interface TrainableModelInit {
  name: string;
  project: string;
  /** A Hugging Face repo id, a URL or a local folder. */
  baseModel: string;
  lora?: Partial<LoraConfig>;
  seed?: number;
}

export class TrainableModel {
  readonly spec: ModelSpec;
  private backend?: Backend;

  constructor(init: TrainableModelInit) {
    for (const k of Object.keys(init)) {
      if (!["name", "project", "baseModel", "lora", "seed"].includes(k))
        throw new Error(`TrainableModel: unknown option "${k}"`);
    }
    this.spec = {
      name: init.name,
      project: init.project,
      baseModel: init.baseModel,
      lora: validateLoraConfig({ ...DEFAULT_LORA, ...init.lora }),
      seed: init.seed ?? 0,
    };
  }

  get name(): string {
    return this.spec.name;
  }
  get project(): string {
    return this.spec.project;
  }

  private need(): Backend {
    if (!this.backend) throw new Error(`TrainableModel "${this.name}": call register(backend) first`);
    return this.backend;
  }

  /** Loads the base model with this adapter (resuming at the latest checkpoint when there is one). */
  async register(backend: Backend): Promise<void> {
    await backend.register(this.spec);
    this.backend = backend;
  }

  openaiClient(): OpenAI {
    return this.need().openaiClient(this.spec);
  }

  /** The name to put in chat.completions requests. */
  getInferenceName(): string {
    return this.name;
  }

  getStep(): Promise<number> {
    return this.need().getStep(this.spec);
  }

  train(groups: TrajectoryGroup[], config: Partial<TrainConfig> = {}): Promise<TrainResult> {
    return this.need().train(this.spec, groups, config);
  }

  /** Records groups (e.g. an evaluation) and their reward metrics under a split ("val" by default). */
  log(groups: TrajectoryGroup[], opts: { split?: string; metrics?: Record<string, number> } = {}): Promise<void> {
    return this.need().log(this.spec, groups, opts.split ?? "val", opts.metrics);
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
