// LocalBackend: the model and its training on this device's WebGPU (Node through Dawn, or a browser
// worker). Runs live under `.art/{project}/models/{name}/` (Node) or the same keys in IndexedDB.
import type OpenAI from "openai";
import { Engine, type EngineOptions } from "../engine.ts";
import { BaseModels } from "../model/bases.ts";
import { IdbStore } from "../store/idb.ts";
import { FsStore } from "../store/fs.ts";
import type { RunStore } from "../store/store.ts";
import { lossCoefficients } from "../train/normalize.ts";
import { computeAdvantages } from "./advantages.ts";
import {
  specOf,
  logTargetOf,
  type Backend,
  type LogTarget,
  type ModelRef,
  type ModelSpec,
  type TrainResult,
  type TrainSftResult,
} from "./backend.ts";
import { packOptimizer, RunFiles, stepDir, unpackOptimizer } from "./checkpoints.ts";
import { DEFAULT_TRAIN_CONFIG, resolveTrainConfig, type TrainConfig } from "./train-config.ts";
import { maxLoraRank, validateLoraConfig } from "../model/lora.ts";
import { readAdapterConfig } from "../model/peft.ts";
import { checkRewards, type TrajectoryGroup, type TrajectoryLike } from "./trajectories.ts";
import { NO_GRADIENT, planStep, stepMetrics, stepSequences, updateAdapter, type Update } from "./train-step.ts";
import { resolveSftConfig, sftBatches, sftUpdates, type SftMetrics, type TrainSftConfig } from "./train-sft.ts";

export interface LocalBackendOptions {
  /** Node: the runs folder (default ".art"). */
  path?: string;
  /** Where runs are kept; default: the file system in Node, IndexedDB in a browser. */
  store?: RunStore;
  /** Options for loading each run's engine (KV slots, context, GPU, ...). Runs of the same base model share its
   *  weights on the GPU through `engine.bases` (default: a registry of this backend's own). */
  engine?: EngineOptions;
}

interface Run {
  spec: ModelSpec;
  engine: Engine;
  files: RunFiles;
  step: number;
}

const isNode = () => typeof process !== "undefined" && !!process.versions?.node;

export class LocalBackend implements Backend {
  private runs = new Map<string, Run>();
  private store?: RunStore;
  private engineOpts: EngineOptions;
  /** Registrations, training steps and close, one at a time: each may allocate on the shared device, and a
   *  failed step gives back what it still holds (Gpu.scope), which needs no other such work in flight. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private opts: LocalBackendOptions = {}) {
    this.engineOpts = { ...opts.engine, bases: opts.engine?.bases ?? new BaseModels() };
  }

  private serial<T>(f: () => Promise<T>): Promise<T> {
    const p = this.queue.then(f);
    this.queue = p.catch(() => {});
    return p;
  }

  private async getStore(): Promise<RunStore> {
    this.store ??= this.opts.store ?? (isNode() ? await FsStore.open(this.opts.path ?? ".art") : new IdbStore());
    return this.store;
  }

  private key(spec: ModelSpec): string {
    return `${spec.project}/${spec.name}`;
  }

  private run(spec: ModelSpec): Run {
    const r = this.runs.get(this.key(spec));
    if (!r) throw new Error(`model "${spec.name}" (project "${spec.project}") is not registered with this backend`);
    return r;
  }

  /** The engine serving a registered model (for direct access, e.g. evaluation in the same process). */
  engine(spec: ModelSpec): Engine {
    return this.run(spec).engine;
  }

  async register(spec: ModelSpec): Promise<{ step: number }> {
    return this.serial(() => this.registerNow(spec));
  }

  private async registerNow(spec: ModelSpec): Promise<{ step: number }> {
    const existing = this.runs.get(this.key(spec));
    if (existing) return { step: existing.step };
    const files = new RunFiles(await this.getStore(), spec.project, spec.name);
    const saved = await files.readJson<{ base_model: string; lora: ModelSpec["lora"]; quantize?: string }>(
      "model.json",
    );
    // An adapter is trained against the base weights it ran on: a run on q4 weights goes on with q4 weights.
    const quantize = this.engineOpts.quantize;
    if (saved) {
      const same = saved.base_model === spec.baseModel && JSON.stringify(saved.lora) === JSON.stringify(spec.lora);
      if (!same) {
        throw new Error(
          `${files.path("model.json")}: this run was created with base model ${saved.base_model} and LoRA ${JSON.stringify(saved.lora)}; ` +
            `register it with the same settings, or use another model name`,
        );
      }
      if (saved.quantize !== quantize) {
        const was = saved.quantize ? `${saved.quantize} weights` : "the base model's own weights";
        const now = quantize ? `${quantize} weights` : "its own weights";
        throw new Error(
          `${files.path("model.json")}: this run was trained on ${was}, and this backend loads ${now}; ` +
            `load it as it was trained (engine option quantize: ${saved.quantize ? `"${saved.quantize}"` : "none"}), ` +
            `or use another model name`,
        );
      }
    } else {
      await files.writeJson("model.json", {
        name: spec.name,
        project: spec.project,
        base_model: spec.baseModel,
        ...(quantize ? { quantize } : {}),
        lora: spec.lora,
        seed: spec.seed,
        trainable: true,
      });
    }
    // Loading plans training too: a run whose longest possible sequence cannot train is refused up front.
    const lcfg = validateLoraConfig(spec.lora ?? {});
    const train = {
      lora: { rank: maxLoraRank(lcfg), targets: lcfg.targets },
      microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens,
    };
    const engine = await Engine.load(spec.baseModel, { train, ...this.engineOpts, name: spec.name });
    try {
      engine.attachLora(spec.lora, spec.seed);
      const run: Run = { spec, engine, files, step: 0 };
      const latest = await files.latestStep();
      if (latest !== null) await this.restore(run, latest);
      else await this.checkpoint(run, 0);
      this.runs.set(this.key(spec), run);
      return { step: run.step };
    } catch (e) {
      await engine.close(); // e.g. an unreadable checkpoint: the engine (and its hold on the base model) goes
      throw e;
    }
  }

  /** Puts the adapter and optimizer state of checkpoint `step` on the GPU and makes it the run's step. */
  private async restore(run: Run, step: number): Promise<void> {
    const { files, engine } = run;
    const lora = engine.model.lora!;
    const ck = await files.readCheckpoint(step);
    if (Object.keys(ck.adapterConfig).length) {
      // The checkpoint's own adapter_config.json must describe the adapter this run trains (model.json's LoRA).
      const where = `${files.path(`checkpoints/${stepDir(step)}`)}/adapter_config.json`;
      const saved = readAdapterConfig(ck.adapterConfig, where);
      const want = lora.config;
      if (JSON.stringify(saved) !== JSON.stringify(want))
        throw new Error(
          `${where}: LoRA ${JSON.stringify(saved)} differs from the run's ${JSON.stringify(want)}; ` +
            `register the model with the checkpoint's LoRA settings`,
        );
    }
    await lora.load(ck.adapter);
    lora.ensureOptimizer();
    if (ck.optimizer) {
      const o = await unpackOptimizer(ck.optimizer);
      if (o.m.length !== lora.size)
        throw new Error(
          `${files.path(`checkpoints/${stepDir(step)}`)}: optimizer state has ${o.m.length} values, the adapter ${lora.size}`,
        );
      engine.gpu.write(lora.m!, o.m);
      engine.gpu.write(lora.v!, o.v);
      // Checkpoints before the count was saved ran one update a step.
      const updates = o.state.updates === undefined ? step : Number(o.state.updates);
      if (!(Number.isInteger(updates) && updates >= 0))
        throw new Error(
          `${files.path(`checkpoints/${stepDir(step)}`)}: optimizer state's "updates" ${JSON.stringify(o.state.updates)} is not a count`,
        );
      lora.updates = updates;
    } else lora.updates = step;
    run.step = step;
  }

  openaiClient(spec: ModelSpec): OpenAI {
    return this.run(spec).engine.openaiClient();
  }

  async getStep(spec: ModelSpec): Promise<number> {
    return this.run(spec).step;
  }

  private async checkpoint(run: Run, step: number): Promise<void> {
    const lora = run.engine.model.lora!;
    lora.ensureOptimizer();
    const gpu = run.engine.gpu;
    const [m, v] = await Promise.all([gpu.readF32(lora.m!, lora.size), gpu.readF32(lora.v!, lora.size)]);
    await run.files.writeCheckpoint(step, {
      adapterConfig: lora.adapterConfig(run.spec.baseModel),
      adapter: await lora.toSafetensors(),
      optimizer: packOptimizer(m, v, { step: String(step), updates: String(lora.updates), format: "webart-adamw" }),
    });
  }

  async train(model: ModelRef, groups: TrajectoryGroup[], partial: Partial<TrainConfig> = {}): Promise<TrainResult> {
    const cfg = resolveTrainConfig(partial);
    checkRewards(groups, "train");
    const run = this.run(specOf(model));
    return this.serial(() => this.trainNow(run, groups, cfg));
  }

  /**
   * One step: tokenize and pack → loss normalisation → plan → gradients → optimizer → checkpoint → metrics. A step
   * that fails leaves the run as it was: the step counter and the latest checkpoint unchanged, the adapter on the
   * GPU that checkpoint's, and nothing the step allocated still held.
   */
  private async trainNow(run: Run, groups: TrajectoryGroup[], cfg: TrainConfig): Promise<TrainResult> {
    const { engine } = run;
    const t0 = performance.now();
    const next = run.step + 1;
    const adv = computeAdvantages(groups, cfg.scaleRewards);
    const batch = stepSequences(engine, groups, adv, cfg, next);
    const { seqs } = batch;
    const coefs = lossCoefficients(
      seqs.map((s) => s.n),
      cfg.lossType,
      cfg.drGrpoMaxTokens,
    );
    seqs.forEach((s, i) => (s.coef = coefs[i]));
    const plan = planStep(engine, seqs, cfg);
    const t1 = performance.now();
    const skipped = seqs.length === 0;
    let update: Update = { grad: NO_GRADIENT, opt: { gradNorm: 0, finite: true }, peak: 0, t2: t1, t3: t1 };
    // Whether the adapter on the GPU may have moved past the latest checkpoint (put back if the step fails).
    let moved = false;
    try {
      if (skipped) {
        console.warn(
          `train step ${next}: no trajectory has a non-zero advantage (${adv.groupsZeroVariance} zero-variance groups); the step advances without an update`,
        );
      } else update = await updateAdapter(engine, seqs, cfg, plan.choice!, () => (moved = true));
      // The step's trajectories are written before its checkpoint moves the `latest` pointer (readers list only
      // steps up to it; a crash in between redoes the step and rewrites them); the history row, which times the
      // checkpoint, follows it.
      await run.files.writeTrajectories("train", next, groups);
      await this.checkpoint(run, next);
    } catch (e) {
      if (moved) await this.putBack(run, e as Error);
      throw e;
    }
    run.step = next;
    const times = { t0, t1, t4: performance.now() };
    const metrics = stepMetrics({ step: next, groups, adv, batch, plan, update, skipped, times });
    const row: Record<string, unknown> = { step: run.step, recorded_at: new Date().toISOString() };
    for (const [k, v] of Object.entries(metrics)) if (k !== "step") row[`train/${k}`] = v;
    await run.files.appendHistory(row);
    const ck = run.files.path(`checkpoints/${stepDir(run.step)}`);
    return { step: run.step, metrics, checkpointPath: run.files.store.location?.(ck) ?? ck };
  }

  async trainSft(
    model: ModelRef,
    trajectories: Iterable<TrajectoryLike>,
    partial: Partial<TrainSftConfig> = {},
  ): Promise<TrainSftResult> {
    const cfg = resolveSftConfig(partial);
    const run = this.run(specOf(model));
    const list = [...trajectories];
    return this.serial(() => this.trainSftNow(run, list, cfg));
  }

  /**
   * Supervised fine-tuning: tokenize and batch → one update a batch → one checkpoint, at the run's next step. As for
   * a GRPO step, a call that fails leaves the run at its latest checkpoint, adapter and optimizer state included.
   */
  private async trainSftNow(run: Run, trajectories: TrajectoryLike[], cfg: TrainSftConfig): Promise<TrainSftResult> {
    const { engine } = run;
    const t0 = performance.now();
    const next = run.step + 1;
    const b = sftBatches(engine, trajectories, cfg);
    const t1 = performance.now();
    let moved = false;
    let u: Awaited<ReturnType<typeof sftUpdates>>;
    let t2: number;
    try {
      u = await sftUpdates(engine, b, cfg, () => (moved = true));
      t2 = performance.now();
      await this.checkpoint(run, next);
    } catch (e) {
      if (moved) await this.putBack(run, e as Error);
      throw e;
    }
    run.step = next;
    const t3 = performance.now();
    const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
    const processed = b.batches.reduce((a, x) => a + x.seqs.reduce((c, s) => c + s.ids.length, 0), 0);
    const metrics: SftMetrics = {
      step: next,
      loss: u.loss,
      batch_losses: u.losses,
      grad_norm: mean(u.gradNorms),
      num_batches: b.batches.length,
      num_trajectories: b.trajectories,
      num_sequences: b.batches.reduce((a, x) => a + x.seqs.length, 0),
      num_tokens_trained: u.tokens,
      learning_rate: mean(b.batches.map((x) => x.lr)),
      tokens_per_second: processed / ((t2 - t1) / 1000),
      step_seconds: (t3 - t0) / 1000,
      time_tokenize: (t1 - t0) / 1000,
      time_checkpoint: (t3 - t2) / 1000,
      finite: u.finite,
      micro_batch_tokens: u.microBatch,
      memory_peak_gib: u.peak / 2 ** 30,
    };
    const row: Record<string, unknown> = { step: run.step, recorded_at: new Date().toISOString() };
    for (const [k, v] of Object.entries(metrics)) if (k !== "step" && k !== "batch_losses") row[`train/sft_${k}`] = v;
    await run.files.appendHistory(row);
    const ck = run.files.path(`checkpoints/${stepDir(run.step)}`);
    return { step: run.step, metrics, checkpointPath: run.files.store.location?.(ck) ?? ck };
  }

  /** Puts the latest checkpoint's adapter back on the GPU after step error `e`. */
  private async putBack(run: Run, e: Error): Promise<void> {
    await run.engine.scheduler
      .exclusive(() => this.restore(run, run.step))
      .catch((r: Error) => {
        throw new Error(
          `${e.message} (and putting back checkpoint ${run.step} failed: ${r.message}; register the model again)`,
          { cause: e },
        );
      });
  }

  async log(
    model: LogTarget,
    groups: TrajectoryGroup[],
    opts: { split?: string; metrics?: Record<string, number>; step?: number } = {},
  ): Promise<void> {
    const split = opts.split ?? "val";
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(split))
      throw new Error(`log: split ${JSON.stringify(split)} must be letters, digits, '.', '_', '-' (a folder name)`);
    if (opts.step !== undefined && !(Number.isInteger(opts.step) && opts.step >= 0))
      throw new Error(`log: step ${String(opts.step)} must be an integer >= 0`);
    for (const [k, v] of Object.entries(opts.metrics ?? {}))
      if (typeof v !== "number" || !Number.isFinite(v))
        throw new Error(`log: metrics.${k} ${String(v)} is not a finite number`);
    checkRewards(groups, "log");
    const { spec, name, project } = logTargetOf(model);
    let files: RunFiles;
    let step: number;
    if (spec) {
      const run = this.run(spec);
      files = run.files;
      step = opts.step ?? run.step;
    } else {
      // A model that does not train here (a prompted baseline): its own run folder, step 0 unless given.
      files = new RunFiles(await this.getStore(), project, name);
      if (!(await files.readJson("model.json")))
        await files.writeJson("model.json", { name, project, trainable: false });
      step = opts.step ?? 0;
    }
    const row: Record<string, unknown> = { step, recorded_at: new Date().toISOString(), ...logMetrics(groups, split) };
    for (const [k, v] of Object.entries(opts.metrics ?? {})) row[`${split}/${k}`] = v;
    if (groups.length) await files.writeTrajectories(split, step, groups);
    await files.appendHistory(row);
  }

  async listCheckpoints(spec: ModelSpec): Promise<number[]> {
    return this.run(spec).files.listCheckpoints();
  }

  async deleteCheckpoints(spec: ModelSpec, steps: number[]): Promise<void> {
    const run = this.run(spec);
    for (const s of steps) {
      if (s === run.step) throw new Error(`deleteCheckpoints: step ${s} is the latest checkpoint`);
      await run.files.deleteCheckpoint(s);
    }
  }

  async history(spec: ModelSpec): Promise<Record<string, unknown>[]> {
    return this.run(spec).files.history();
  }

  async adapterFiles(spec: ModelSpec, step?: number): Promise<{ step: number; files: Record<string, Uint8Array> }> {
    const run = this.run(spec);
    const s = step ?? run.step;
    const d = `checkpoints/${stepDir(s)}`;
    const out: Record<string, Uint8Array> = {};
    for (const f of ["adapter_config.json", "adapter_model.safetensors"]) {
      const b = await run.files.store.read(run.files.path(`${d}/${f}`));
      if (!b) throw new Error(`${run.files.path(d)}/${f} does not exist`);
      out[f] = b;
    }
    return { step: s, files: out };
  }

  /** Closes every run's engine, after the registration or step in flight. */
  async close(): Promise<void> {
    return this.serial(async () => {
      for (const r of this.runs.values()) await r.engine.close();
      this.runs.clear();
    });
  }
}

/** The history metrics of logged groups (none for no groups): reward, its mean within-group std, counts, the
 *  exception rate and the mean of every numeric trajectory metric (e.g. win), each as `{split}/{name}`. */
function logMetrics(groups: TrajectoryGroup[], split: string): Record<string, number> {
  if (!groups.length) return {};
  const adv = computeAdvantages(groups, false);
  const n = groups.reduce((s, g) => s + g.trajectories.length, 0);
  const e = groups.reduce((s, g) => s + g.exceptions.length, 0);
  const out: Record<string, number> = {
    [`${split}/reward`]: adv.rewardMean,
    [`${split}/reward_std_dev`]: adv.meanGroupStd,
    [`${split}/num_trajectories`]: n,
    [`${split}/exception_rate`]: n + e ? e / (n + e) : 0,
  };
  const sums = new Map<string, { s: number; n: number }>();
  for (const g of groups)
    for (const t of g.trajectories)
      for (const [k, v] of Object.entries(t.metrics)) {
        const x = typeof v === "boolean" ? Number(v) : v;
        const m = sums.get(k) ?? { s: 0, n: 0 };
        m.s += x;
        m.n++;
        sums.set(k, m);
      }
  for (const [k, { s, n: c }] of sums) out[`${split}/${k}`] = s / c;
  return out;
}
