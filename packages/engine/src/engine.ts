// The engine: a loaded model (weights on the GPU, tokenizer, chat template), its KV cache and batching
// scheduler, and the OpenAI-compatible handler and client in front of them. Runs the same in Node, in a
// Web Worker, or in a page.
import type OpenAI from "openai";
import { getDevice, isNode, type Gpu } from "@webart/gpu";
import type { ModelConfig } from "./config/index.ts";
import { Scheduler } from "./generate/scheduler.ts";
import type { Generator, TokenConstraint } from "./generate/types.ts";
import { BaseModels, type BaseModel } from "./model/bases.ts";
import { LoraState, validateLoraConfig, type LoraConfig } from "./model/lora.ts";
import { DECODE_ROWS } from "./model/decode-rows.ts";
import { Model, ropeInMatvec } from "./model/model.ts";
import { ModelRunner } from "./model/runner.ts";
import { clientForHandler } from "./openai/client.ts";
import { createHandler, type Handler, type HandlerTokenizer, type ServedModel } from "./openai/handler.ts";
import { detectToolFormat, templateMessages } from "./openai/tools.ts";
import {
  checkPlan,
  defaultMemoryBudget,
  planMemory,
  planDroppingMerge,
  planTraining,
  type LoraTarget,
  type MemoryPlan,
  type PlanSetup,
} from "./plan.ts";
import {
  coopConfig,
  decodeSplitTarget,
  loraGradChunk,
  tuneKernels,
  tuneScratchBytes,
  type KernelTuning,
} from "@webart/shaders";
import { isCpuDevice } from "@webart/gpu";
import { Tokenizer } from "./tokenizer/index.ts";
import { defaultTuneCache, restoreTuning, saveTuning, type StartupTuning, type TuneCache } from "./tune-cache.ts";
import type { LoadProgress, ModelSource, OpenModelOptions, OpenedModel } from "./weights/index.ts";
import {
  canonicalConstraint,
  CanonicalPairs,
  choiceConstraint,
  createJsonConstraintFactory,
  tokenBytes,
  toolCallConstraint,
  toolCallSchema,
  vocabFor,
  type ToolSpecLike,
} from "./constrain/index.ts";

export interface EngineOptions extends OpenModelOptions {
  gpu?: Gpu;
  /** Base models already on the device: an engine of a base model loaded through the same registry shares its
   *  weights, files and tokenizer (default: a registry of its own, so nothing is shared). */
  bases?: BaseModels;
  /** Name clients use in `model` (default: the source's folder or repo name). */
  name?: string;
  /** Sequences the KV cache holds at once (default 16). */
  kvSlots?: number;
  /** Context length of each sequence (default min(max_position_embeddings, 2048)). */
  maxContext?: number;
  /** Prompt tokens per engine step (default 256). */
  prefillChunk?: number;
  /** Free-text decode steps run in a row without a readback between them (default 8; 1: one at a time). Tokens
   *  then reach onToken and streams in bursts of up to this many. */
  decodeAhead?: number;
  /** Keep 16-bit weights as f32 on the GPU (default false: frozen weights stay in their file's form). */
  weightsF32?: boolean;
  /**
   * "q4": quantize the layers' projections to 4 bits as they load (groups of 32 with a bf16 scale: 4.5 bits a weight;
   * the embedding and LM head too where their rows are whole groups), for a base model in about 0.28 of its 16-bit bytes. Products read
   * an f16 copy of one projection at a time, made as they run; inference and training compute with the same q4 values.
   * Default: off (the file's weights as they are).
   */
  quantize?: "q4";
  /** Bytes webart may hold on this GPU, all runs on the device together: a plan over it is refused before
   *  anything is allocated (default: defaultMemoryBudget, 4 GiB in a browser, 16 GiB in Node on a GPU). */
  memoryBudget?: number;
  /** Plan a training step too (LocalBackend passes its LoRA and micro-batch): the load is refused unless a
   *  sequence as long as the context can train within the budget (with recompute if need be). */
  train?: { lora: { rank: number; targets: readonly LoraTarget[] }; microBatchTokens: number; recompute?: boolean };
  onProgress?: (p: LoadProgress) => void;
  /** Constrained decoding for response_format and forced tool calls (default on). */
  constrained?: boolean;
  /** Time the kernels' variants on this device before serving (default on; once per device and model shape:
   *  seconds on a CPU device, `npm run bench -- kernels` prints how long; see tune/kernels.ts). */
  tune?: boolean;
  /** Where start-up tuning's results are kept between processes and visits, so a later load on this device with
   *  these kernels times nothing (default: defaultTuneCache(), a JSON file in Node, ~/.cache/webart/tuning.json
   *  or $WEBART_TUNING_CACHE, and IndexedDB in a browser; false: none). */
  tuneCache?: TuneCache | false;
  /** Forward products with weights (prefill, training's forward, the LM head's logits) on tensor cores, operands
   *  rounded to f16, where the device has them (Dawn's subgroup matrices; default on). */
  tensorCores?: boolean;
  /** With tensorCores, backward's input gradients too, each scaled into f16's range first (default on: on an H200
   *  it made the GRPO step of 8 x 512 tokens 1.24-1.6x faster, with LoRA gradients within 6.4e-4 (relative L2) of the
   *  f32 backward's; `npm run bench -- gpu` times it and compares them). */
  tensorCoresBackward?: boolean;
  /** Inference with an adapter runs on f32 weights with the adapter merged in (W + s·B·A, made again after each
   *  change of the adapter; Model.mergeLora): decoding with it costs what decoding without it does, for an f32 copy of
   *  the layers' weights (twice their bytes for 16-bit weights, whose steps past decodeRows rows keep the terms
   *  apart). Default: defaultMergeLora (f32 weights, or a GPU), where the plan fits with the copy. */
  mergeLora?: boolean;
}

/**
 * Whether inference merges the adapter into an f32 copy of the weights unless told (EngineOptions.mergeLora): f32
 * weights always; 16-bit ones on a GPU, where a decode step is bound by its dispatches. On a CPU device a 16-bit
 * model's decode step is bound by its bytes, which the f32 copy doubles (`npm run bench -- gpu --quick`: 0.91x at
 * batch 1 on Qwen2.5-0.5B's widths).
 */
export function defaultMergeLora(gpu: Gpu, weightBytes: 2 | 4): boolean {
  return weightBytes === 4 || !isCpuDevice(gpu);
}

/** The tokenizer as the handler and the trainer need it: stop ids from the config and generation_config too. */
export function chatTokenizer(
  tok: Tokenizer,
  config: ModelConfig,
  generationConfig: Record<string, unknown> | null,
): HandlerTokenizer & { inner: Tokenizer } {
  const stops = new Set<number>(config.eosTokenIds);
  if (tok.eosId !== null) stops.add(tok.eosId);
  const gen = generationConfig?.eos_token_id;
  for (const id of Array.isArray(gen) ? gen : typeof gen === "number" ? [gen] : []) stops.add(id as number);
  const imEnd = tok.tokenToId("<|im_end|>");
  if (imEnd !== undefined) stops.add(imEnd);
  const format = detectToolFormat(tok.chatTemplate);
  return {
    inner: tok,
    stopTokenIds: [...stops],
    applyChatTemplate: (messages, opts) =>
      tok.applyChatTemplate(templateMessages(format, messages) as never, opts as never),
    encode: (text, o) => tok.encode(text, o),
    decode: (ids, o) => tok.decode(ids, o),
    tokenBytes: (id) => tokenBytes(tok, id),
  };
}

export class Engine {
  readonly scheduler: Scheduler;
  readonly handler: Handler;
  readonly served: ServedModel[] = [];
  /** What start-up tuning did in this load: entries read from the cache, entries timed, and where they are kept. */
  startupTuning: StartupTuning = { ran: false, restored: 0, measured: 0, ms: 0 };
  private client?: OpenAI;
  private closing?: Promise<void>;

  private constructor(
    readonly gpu: Gpu,
    readonly name: string,
    private readonly base: BaseModel,
    readonly model: Model,
    readonly runner: ModelRunner,
    readonly tokenizer: ReturnType<typeof chatTokenizer>,
    readonly plan: MemoryPlan,
    /** The setup the plan was made for (training plans each step from it) and the budget it fits. */
    readonly planSetup: Omit<PlanSetup, "train" | "vocabChunk">,
    readonly memoryBudget: number,
    opts: EngineOptions,
  ) {
    this.scheduler = new Scheduler(runner, { prefillChunk: opts.prefillChunk, decodeAhead: opts.decodeAhead });
    const toolFormat = detectToolFormat(tokenizer.inner.chatTemplate);
    const served: ServedModel = {
      name,
      generator: this.scheduler,
      tokenizer,
      toolFormat,
      created: Math.floor(Date.now() / 1000),
    };
    if (opts.constrained !== false) {
      // The vocabulary tables are built on first use (about a second for a 150k vocabulary).
      const V = runner.vocabSize;
      const eos = tokenizer.stopTokenIds;
      const json = createJsonConstraintFactory(tokenizer.inner, { eosIds: eos, vocabSize: V });
      // Every constraint samples only the token pairs the tokenizer itself writes (constrain/canonical.ts).
      let pairs: CanonicalPairs | undefined;
      const canonical = (f: () => TokenConstraint) =>
        canonicalConstraint((pairs ??= new CanonicalPairs(tokenizer.inner, vocabFor(tokenizer.inner, V, []), V)), f);
      served.jsonConstraint = (schema) => canonical(json(schema));
      served.toolConstraint = (tools, only) => {
        // Llama 3: the reply is the call's JSON, then the end of the turn; Hermes: the JSON in <tool_call> tags.
        if (toolFormat === "llama3_json")
          return canonical(json(toolCallSchema(tools as ToolSpecLike[], only, "parameters")));
        const body = json(toolCallSchema(tools as ToolSpecLike[], only));
        return canonical(toolCallConstraint(vocabFor(tokenizer.inner, V, []), V, eos, body));
      };
      served.choiceConstraint = (choices) =>
        canonical(choiceConstraint(vocabFor(tokenizer.inner, V, []), V, eos, choices));
    }
    this.served.push(served);
    this.handler = createHandler({ models: () => this.served });
  }

  /** The base model's files (shared with the engines of the same base model in `EngineOptions.bases`). */
  get opened(): OpenedModel {
    return this.base.opened;
  }

  static async load(source: ModelSource, opts: EngineOptions = {}): Promise<Engine> {
    const gpu = opts.gpu ?? (await getDevice());
    const base = await (opts.bases ?? new BaseModels()).acquire(gpu, source, opts);
    const own: { model?: Model; runner?: ModelRunner } = {};
    try {
      return await Engine.build(gpu, base, opts, own);
    } catch (e) {
      // A refused or failed load keeps nothing: this engine's buffers, and the base model unless others use it.
      own.runner?.dispose();
      own.model?.releaseTables();
      await base.release();
      throw e;
    }
  }

  /** The rest of load once the base model is held; what it allocates goes in `own`, for load to free on failure. */
  private static async build(
    gpu: Gpu,
    base: BaseModel,
    opts: EngineOptions,
    own: { model?: Model; runner?: ModelRunner },
  ): Promise<Engine> {
    const opened = base.opened;
    const c = opened.config;
    const maxContext = opts.maxContext ?? Math.min(c.maxPositionEmbeddings, 2048);
    const kvSlots = opts.kvSlots ?? 16;
    // The plan comes first: nothing is allocated for a model that does not fit.
    const budget = opts.memoryBudget ?? defaultMemoryBudget({ browser: !isNode(), cpuDevice: isCpuDevice(gpu) });
    const weightBytes = opts.weightsF32 || c.torchDtype === "float32" || !c.torchDtype ? 4 : 2;
    if (opts.quantize !== undefined && opts.quantize !== "q4")
      throw new Error(`EngineOptions.quantize: "${String(opts.quantize)}" is not a quantization webart has (q4)`);
    if (opts.quantize && opts.weightsF32)
      throw new Error("EngineOptions: quantize and weightsF32 exclude each other (q4 weights or f32 ones)");
    const setup: Omit<PlanSetup, "train" | "vocabChunk"> = {
      weightBytes,
      ...(opts.quantize ? { quantize: opts.quantize } : {}),
      kvSlots,
      kvContext: maxContext,
      prefillChunk: opts.prefillChunk ?? 256,
      lora: opts.train?.lora,
      // Another engine's upload of these weights is already live (in inUse): not counted twice.
      sharedWeights: base.weightsShared,
      // The device kind's LoRA layout until tuning below says which one runs.
      loraGradChunk: loraGradChunk(gpu),
      ropeInMatvec: ropeInMatvec(gpu, {}),
      // q4 weights have no merged copy (an f32 one would be 7x their bytes).
      mergeLora: !opts.quantize && (opts.mergeLora ?? defaultMergeLora(gpu, weightBytes)),
      decodeAhead: opts.decodeAhead ?? 8,
      // Split-KV's partials in decode steps, as this device's untuned kernels split (tuning below may change it).
      splitKvTarget: decodeSplitTarget(gpu, c.headDim),
    };
    const limits = { maxStorageBufferBindingSize: gpu.maxStorageBinding, maxBufferSize: gpu.maxBufferSize };
    const inUse = gpu.pool.stats.liveBytes;
    const tuneShape = {
      vocab: c.vocabSize,
      hidden: c.hiddenSize,
      heads: c.numHeads,
      kvHeads: c.numKvHeads,
      headDim: c.headDim,
      intermediate: c.intermediateSize,
      qkNorm: c.qkNorm,
      tensorCores: opts.tensorCores ?? true,
      q4: opts.quantize === "q4",
    };
    const makePlan = (): MemoryPlan => {
      if (opts.train) {
        const t = opts.train;
        return planTraining(c, setup, limits, budget, {
          microBatchTokens: t.microBatchTokens,
          longest: maxContext,
          recompute: t.recompute,
          inUse,
        }).plan;
      }
      const p = planMemory(c, { ...setup, vocabChunk: Math.min(c.vocabSize, 8192) });
      checkPlan(p, limits, budget, inUse);
      return p;
    };
    let plan = planDroppingMerge(setup, makePlan, opts.mergeLora !== undefined);
    const startupTuning: StartupTuning = { ran: opts.tune !== false, restored: 0, measured: 0, ms: 0 };
    const cache =
      opts.tune === false || opts.tuneCache === false ? undefined : (opts.tuneCache ?? (await defaultTuneCache()));
    if (cache) {
      startupTuning.cache = cache.where;
      startupTuning.restored = await restoreTuning(gpu, cache);
    }
    // This device's entries before tuning (the cache's among them): what tuning then sets anew was measured here.
    const known = new Map(gpu.tuning);
    if (opts.tune !== false) {
      // Start-up tuning's buffers (what its largest problem holds; measuring whether this device is a GPU first) are
      // planned beside the weights, after the rest of the plan was checked (nothing is allocated for a load refused).
      // q4 products read f16 copies of their weights, so their kernels are tuned on f16.
      const tuned = opts.quantize ? "f16" : weightBytes === 4 ? "f32" : "bf16";
      const t0 = performance.now();
      setup.tuning = await tuneScratchBytes(gpu, { weights: tuned, ...tuneShape });
      startupTuning.ms += performance.now() - t0;
      plan = makePlan();
    }
    const weights = await base.weights(opts.onProgress);
    // Measure the kernels' variants for this model's shapes on this device (once per device and shape).
    let tuning: KernelTuning = {};
    if (opts.tune !== false) {
      const dtype = weights.layers[0]?.q.dtype ?? "f32";
      const t0 = performance.now();
      tuning = await tuneKernels(gpu, { weights: dtype === "q4" ? "f16" : dtype, ...tuneShape });
      startupTuning.ms += performance.now() - t0;
      // Its uniform and readback buffers go back to the device too, not into the pool's free lists.
      gpu.pool.trim();
      setup.loraGradChunk = loraGradChunk(gpu, tuning.lora);
      const rope = ropeInMatvec(gpu, tuning);
      const splitKv = decodeSplitTarget(gpu, c.headDim, tuning.attention);
      const sampleSplit = tuning.sample?.split ?? 1;
      if (
        (tuning.decodeRows !== undefined && tuning.decodeRows < DECODE_ROWS) ||
        rope !== setup.ropeInMatvec ||
        splitKv !== setup.splitKvTarget ||
        sampleSplit > 1
      ) {
        // Steps of more rows than that run the layer one op at a time, RoPE apart from the q|k|v matvec needs the
        // packed q|k|v, and the tuned attention and sampler may split into partials: planned again.
        if (tuning.decodeRows !== undefined && tuning.decodeRows < DECODE_ROWS) setup.decodeRows = tuning.decodeRows;
        setup.ropeInMatvec = rope;
        setup.splitKvTarget = splitKv;
        if (sampleSplit > 1) setup.sampleSplit = sampleSplit;
        plan = makePlan();
      }
      // Done: the load's plan keeps its tuning line, the plans of later steps have none.
      delete setup.tuning;
      startupTuning.measured = [...gpu.tuning].filter(([k, v]) => known.get(k) !== v).length;
      if (cache && startupTuning.measured > 0) await saveTuning(gpu, cache);
    }
    const model = (own.model = new Model(gpu, c, weights, tuning));
    model.tensorCores = (opts.tensorCores ?? true) && coopConfig(gpu) !== undefined;
    model.tensorCoresBackward = opts.tensorCoresBackward ?? true;
    model.mergeLora = !!setup.mergeLora;
    const runner = (own.runner = new ModelRunner(model, kvSlots, maxContext));
    const name = opts.name ?? opened.files.name.split(/[\\/]/).filter(Boolean).pop() ?? "model";
    const engine = new Engine(
      gpu,
      name,
      base,
      model,
      runner,
      chatTokenizer(base.tokenizer, c, opened.generationConfig),
      plan,
      setup,
      budget,
      opts,
    );
    engine.startupTuning = startupTuning;
    return engine;
  }

  get config(): ModelConfig {
    return this.model.config;
  }

  get generator(): Generator {
    return this.scheduler;
  }

  /** Attaches a LoRA adapter (fresh, PEFT-initialised with `seed`), used by inference from now on. */
  attachLora(config: Partial<LoraConfig> = {}, seed = 0): LoraState {
    this.model.lora?.dispose();
    const l = new LoraState(this.gpu, this.config, validateLoraConfig(config));
    l.initialize(seed);
    this.model.lora = l;
    this.model.prepareMerged();
    this.scheduler.invalidateCache();
    return l;
  }

  /** An `openai` SDK client whose requests go straight to this engine's handler. */
  openaiClient(): OpenAI {
    return (this.client ??= clientForHandler(this.handler));
  }

  /**
   * Fails requests still queued, waits for the step in flight (a generation step or a training step), then
   * frees the KV cache and adapter on the GPU and lets go of the base model: its weights are freed and its files
   * closed when no other engine uses them (the pool's free buffers are destroyed). Safe to call twice.
   */
  close(): Promise<void> {
    return (this.closing ??= (async () => {
      await this.scheduler.close();
      this.runner.dispose();
      // This engine's part of the Model (adapter, RoPE table); the base weights go with their last engine.
      this.model.lora?.dispose();
      this.model.lora = undefined;
      this.model.releaseTables();
      await this.base.release();
      this.gpu.pool.trim(); // the pool's free buffers, these among them, go back to the device
    })());
  }
}
