// The model config: a Hugging Face config.json parsed into one typed object for the Llama, Mistral, Qwen2, Qwen3
// and Gemma 3 (text) families. Every field that changes the math is either read here or rejected with a message
// naming it.

/** Architecture family; decides which optional pieces (QKV bias, q/k RMSNorm, Gemma's norms) the model has. */
export type Family = "llama" | "mistral" | "qwen2" | "qwen3" | "gemma3";

/** The gated MLP's activation: silu (SwiGLU) or GELU's tanh approximation (Gemma's gelu_pytorch_tanh). */
export type Activation = "silu" | "gelu_tanh";

/** A layer's attention: causal over the whole context, or over the last `slidingWindow` keys. */
export type LayerType = "full" | "sliding";

/** Dtype the checkpoint says it was saved in (`torch_dtype`); the tensors' own dtypes are what gets loaded. */
export type TorchDtype = "float32" | "float16" | "bfloat16";

/** RoPE frequency scaling: none, linear (all frequencies / factor), or Llama 3.1's piecewise scaling of the low
 * frequencies. */
export type RopeScaling =
  | { type: "none" }
  | { type: "linear"; factor: number }
  | {
      type: "llama3";
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    };

export interface ModelConfig {
  family: Family;
  /** HF class name, e.g. "Qwen3ForCausalLM". */
  architecture: string;
  /** C: residual width (hidden_size). */
  hiddenSize: number;
  /** F: MLP width (intermediate_size). */
  intermediateSize: number;
  /** Transformer blocks (num_hidden_layers). */
  numLayers: number;
  /** H: query heads (num_attention_heads). */
  numHeads: number;
  /** KV: key/value heads (num_key_value_heads); H is a multiple of KV. */
  numKvHeads: number;
  /** D: per-head width (head_dim); H*D may differ from C (Qwen3). */
  headDim: number;
  rmsNormEps: number;
  /** RoPE of the full-attention layers (Gemma 3: the global ones). */
  ropeTheta: number;
  ropeScaling: RopeScaling;
  /** RoPE of the sliding layers where it differs (Gemma 3's rope_local_base_freq); null: the same as above. */
  localRope: { theta: number; scaling: RopeScaling } | null;
  /** Per layer: full causal attention, or a sliding window (Gemma 3's local layers; every layer of a Mistral with
   * a sliding_window). */
  layerTypes: LayerType[];
  /** Keys a sliding layer sees, its own included (HF: key > query - sliding_window); null when no layer slides. */
  slidingWindow: number | null;
  /** Softmax scale of attention: 1/sqrt(head_dim), or Gemma's query_pre_attn_scalar^-0.5. */
  attnScale: number;
  /** The MLP's gate activation (hidden_act, Gemma: hidden_activation). */
  hiddenAct: Activation;
  /** Factor on the embedding lookup: 1, or Gemma's sqrt(hidden_size). */
  embedScale: number;
  /** Gemma: every RMSNorm weight is stored as w - 1, so the norm multiplies by (1 + w). */
  normUnitOffset: boolean;
  /** Gemma: the attention and MLP outputs are RMS-normed before their residual add (post_attention_layernorm,
   * post_feedforward_layernorm), and the MLP's input norm is pre_feedforward_layernorm. */
  sandwichNorms: boolean;
  /** Bias on q_proj, k_proj and v_proj (always on for Qwen2, `attention_bias` otherwise). */
  qkvBias: boolean;
  /** Bias on o_proj (`attention_bias` for Llama and Qwen3; never for Qwen2). */
  oBias: boolean;
  /** Per-head RMSNorm of q and k before RoPE (Qwen3). */
  qkNorm: boolean;
  /** lm_head shares model.embed_tokens' weight. */
  tieWordEmbeddings: boolean;
  maxPositionEmbeddings: number;
  /** V: rows of the embedding (may exceed the tokenizer's vocabulary). */
  vocabSize: number;
  bosTokenId: number | null;
  /** Every id that ends generation (config.json's eos_token_id may be a number or a list). */
  eosTokenIds: number[];
  torchDtype: TorchDtype | null;
}

export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly field: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = "ConfigError";
  }
}

const ARCHITECTURES: Record<string, Family> = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "mistral",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Gemma3ForCausalLM: "gemma3",
};
const MODEL_TYPES: Record<string, Family> = {
  llama: "llama",
  mistral: "mistral",
  qwen2: "qwen2",
  qwen3: "qwen3",
  gemma3_text: "gemma3",
};
// Checkpoints people will try that hold a text model this engine could run, but in another layout.
const OTHER_LAYOUTS: Record<string, string> = {
  Gemma3ForConditionalGeneration:
    "multimodal Gemma 3 checkpoints (4B and up, weights under language_model.*) are not supported; " +
    "text-only Gemma3ForCausalLM checkpoints (gemma-3-270m, gemma-3-1b) are",
  gemma3:
    "multimodal Gemma 3 checkpoints (model_type gemma3, 4B and up) are not supported; " +
    'text-only ones (model_type "gemma3_text": gemma-3-270m, gemma-3-1b) are',
};
// HF's class defaults for fields a config.json may leave out.
const DEFAULT_MAX_POSITIONS: Record<Family, number> = {
  llama: 2048,
  mistral: 131072,
  qwen2: 32768,
  qwen3: 32768,
  gemma3: 131072,
};
const ROPE_KEYS: Record<string, Set<string>> = {
  llama3: new Set([
    "type",
    "rope_type",
    "rope_theta",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
  ]),
  linear: new Set(["type", "rope_type", "rope_theta", "factor"]),
};

type Json = Record<string, unknown>;

const show = (v: unknown): string => (typeof v === "string" ? JSON.stringify(v) : (JSON.stringify(v) ?? String(v)));
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const absent = (v: unknown) => v === undefined || v === null;

/** Parses a config.json (text or already-parsed object) into a ModelConfig, or throws a ConfigError. */
export function parseConfig(json: string | object, file = "config.json"): ModelConfig {
  let raw: unknown = json;
  if (typeof json === "string") {
    try {
      raw = JSON.parse(json);
    } catch (e) {
      throw new ConfigError(file, "", `not valid JSON (${(e as Error).message})`);
    }
  }
  if (!isObject(raw)) throw new ConfigError(file, "", "expected a JSON object");
  const r = new Reader(raw, file);

  const { family, architecture } = readFamily(r);
  const gemma = family === "gemma3";
  // Gemma 3 reads hidden_activation (transformers ignores a hidden_act there); the others hidden_act.
  const hiddenAct: Activation = gemma ? "gelu_tanh" : "silu";
  if (gemma)
    r.unsupported("hidden_activation", (v) => v === undefined || v === "gelu_pytorch_tanh", '"gelu_pytorch_tanh"');
  else r.unsupported("hidden_act", (v) => v === undefined || v === "silu", "silu");
  r.unsupported("mlp_bias", (v) => v === undefined || v === false, "false");
  r.unsupported("attention_dropout", (v) => v === undefined || v === 0, "0");
  r.unsupported("partial_rotary_factor", (v) => v === undefined || v === 1, "1");
  r.unsupported("rope_interleaved", (v) => absent(v) || v === false, "false");
  r.unsupported("attn_logit_softcapping", absent, "null");
  r.unsupported("final_logit_softcapping", absent, "null");
  r.unsupported("use_bidirectional_attention", (v) => absent(v) || v === false, "false");
  if (raw.quantization_config !== undefined) {
    const method = isObject(raw.quantization_config) ? raw.quantization_config.quant_method : undefined;
    r.fail(
      "quantization_config",
      `quantized checkpoints (${show(method)}) are not supported; use the unquantized model`,
    );
  }

  const hiddenSize = r.posInt("hidden_size");
  const numHeads = r.posInt("num_attention_heads");
  const numKvHeads = r.posInt("num_key_value_heads", gemma ? 4 : numHeads);
  if (numHeads % numKvHeads !== 0)
    r.fail(
      "num_key_value_heads",
      `num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`,
    );
  if ((raw.head_dim === undefined || raw.head_dim === null) && !gemma) {
    if (hiddenSize % numHeads !== 0)
      r.fail(
        "head_dim",
        `hidden_size ${hiddenSize} is not a multiple of num_attention_heads ${numHeads} and head_dim is not given`,
      );
  }
  const headDim = r.posInt("head_dim", gemma ? 256 : hiddenSize / numHeads);
  if (headDim % 2 !== 0) r.fail("head_dim", `head_dim ${headDim} must be even for rotary embeddings`);
  const maxPositionEmbeddings = r.posInt("max_position_embeddings", DEFAULT_MAX_POSITIONS[family]);
  const numLayers = r.posInt("num_hidden_layers");
  if (family === "qwen2" || family === "qwen3") checkSlidingWindow(r, numLayers, maxPositionEmbeddings);
  const { layerTypes, slidingWindow } = readLayerTypes(r, family, numLayers);

  // Mistral's projections never have biases (transformers ignores attention_bias there); Qwen2's q/k/v always do.
  const attentionBias = family === "mistral" ? false : r.bool("attention_bias", false);
  const rope = readRope(r, family);
  return {
    family,
    architecture,
    hiddenSize,
    intermediateSize: r.posInt("intermediate_size"),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: r.positive("rms_norm_eps", 1e-6),
    ropeTheta: rope.ropeTheta,
    ropeScaling: rope.ropeScaling,
    localRope: rope.localRope,
    layerTypes,
    slidingWindow,
    attnScale: gemma ? r.positive("query_pre_attn_scalar", 256) ** -0.5 : 1 / Math.sqrt(headDim),
    hiddenAct,
    embedScale: gemma ? Math.sqrt(hiddenSize) : 1,
    normUnitOffset: gemma,
    sandwichNorms: gemma,
    qkvBias: family === "qwen2" ? true : attentionBias,
    oBias: family === "qwen2" ? false : attentionBias,
    qkNorm: family === "qwen3" || gemma,
    tieWordEmbeddings: r.bool("tie_word_embeddings", gemma),
    maxPositionEmbeddings,
    vocabSize: r.posInt("vocab_size"),
    bosTokenId: r.tokenIds("bos_token_id")[0] ?? null,
    eosTokenIds: r.tokenIds("eos_token_id"),
    torchDtype: readDtype(r),
  };
}

/** Typed access to the raw JSON with errors that name file, field and value. */
class Reader {
  constructor(
    readonly raw: Json,
    readonly file: string,
  ) {}

  fail(field: string, message: string): never {
    throw new ConfigError(this.file, field, message);
  }

  posInt(field: string, fallback?: number): number {
    const v = this.raw[field];
    if ((v === undefined || v === null) && fallback !== undefined) return fallback;
    if (v === undefined) this.fail(field, `${field} is missing`);
    if (!Number.isInteger(v) || (v as number) <= 0)
      this.fail(field, `${field} must be a positive integer (got ${show(v)})`);
    return v as number;
  }

  positive(field: string, fallback: number, obj: Json = this.raw, prefix = ""): number {
    const v = obj[field];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
      this.fail(prefix + field, `${prefix}${field} must be a positive number (got ${show(v)})`);
    return v;
  }

  bool(field: string, fallback: boolean): boolean {
    const v = this.raw[field];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "boolean") this.fail(field, `${field} must be true or false (got ${show(v)})`);
    return v;
  }

  tokenIds(field: string): number[] {
    const v = this.raw[field];
    if (v === undefined || v === null) return [];
    const list = Array.isArray(v) ? v : [v];
    if (!list.every((x) => Number.isInteger(x) && x >= 0))
      this.fail(field, `${field} must be a token id or a list of token ids (got ${show(v)})`);
    return list as number[];
  }

  unsupported(field: string, ok: (v: unknown) => boolean, supported: string): void {
    const v = this.raw[field];
    if (!ok(v)) this.fail(field, `${field} ${show(v)} is not supported (supported: ${supported})`);
  }
}

function readFamily(r: Reader): { family: Family; architecture: string } {
  const { architectures, model_type: modelType } = r.raw;
  const supported = Object.keys(ARCHITECTURES).join(", ");
  let archFamily: Family | undefined;
  let architecture: string | undefined;
  if (architectures !== undefined && architectures !== null) {
    if (!Array.isArray(architectures) || architectures.length === 0)
      r.fail("architectures", `architectures must be a non-empty list (got ${show(architectures)})`);
    for (const a of architectures) {
      const f = typeof a === "string" ? ARCHITECTURES[a] : undefined;
      if (!f && typeof a === "string" && OTHER_LAYOUTS[a]) r.fail("architectures", OTHER_LAYOUTS[a]);
      if (!f) r.fail("architectures", `architectures ${show(a)} is not supported (supported: ${supported})`);
      if (archFamily && f !== archFamily)
        r.fail("architectures", `architectures ${show(architectures)} mix model families`);
      archFamily = f;
      architecture ??= a as string;
    }
  }
  let typeFamily: Family | undefined;
  if (modelType !== undefined && modelType !== null) {
    typeFamily = typeof modelType === "string" ? MODEL_TYPES[modelType] : undefined;
    if (!typeFamily && typeof modelType === "string" && OTHER_LAYOUTS[modelType])
      r.fail("model_type", OTHER_LAYOUTS[modelType]);
    if (!typeFamily)
      r.fail(
        "model_type",
        `model_type ${show(modelType)} is not supported (supported: ${Object.keys(MODEL_TYPES).join(", ")})`,
      );
  }
  if (archFamily && typeFamily && archFamily !== typeFamily)
    r.fail("model_type", `model_type ${show(modelType)} disagrees with architectures ${show(architectures)}`);
  const family = archFamily ?? typeFamily;
  if (!family) r.fail("model_type", `neither model_type nor architectures is given (supported: ${supported})`);
  const names = Object.keys(ARCHITECTURES);
  return { family, architecture: architecture ?? names.find((n) => ARCHITECTURES[n] === family)! };
}

// Qwen2/Qwen3 configs carry sliding-window fields that are normally off; a window that can actually bite
// (enabled, shorter than the context, on at least one layer) changes attention and is not implemented.
function checkSlidingWindow(r: Reader, numLayers: number, maxPositions: number): void {
  const {
    use_sliding_window: use,
    sliding_window: window,
    max_window_layers: maxWindowLayers,
    layer_types: types,
  } = r.raw;
  if (use !== true) return;
  if (typeof window !== "number" || window >= maxPositions) return;
  const anySliding = Array.isArray(types)
    ? types.includes("sliding_attention")
    : typeof maxWindowLayers !== "number" || maxWindowLayers < numLayers;
  if (anySliding)
    r.fail(
      "sliding_window",
      `sliding_window ${window} with use_sliding_window true is not supported (supported: use_sliding_window false, ` +
        `or sliding_window >= max_position_embeddings ${maxPositions})`,
    );
}

/**
 * Which layers slide and over how many keys. Gemma 3: `layer_types`, else every `sliding_window_pattern`-th layer
 * (default 6) is full and the others slide over `sliding_window` (default 4096). Mistral: a `sliding_window` number
 * (default 4096 when the field is absent, null for none) applies to every layer. Llama and Qwen: no sliding layers
 * (Qwen's inactive windows are checked by checkSlidingWindow).
 */
function readLayerTypes(
  r: Reader,
  family: Family,
  numLayers: number,
): { layerTypes: LayerType[]; slidingWindow: number | null } {
  const full = (): { layerTypes: LayerType[]; slidingWindow: null } => ({
    layerTypes: Array<LayerType>(numLayers).fill("full"),
    slidingWindow: null,
  });
  if (family !== "mistral" && family !== "gemma3") return full();
  const window = r.raw.sliding_window === null ? null : r.posInt("sliding_window", 4096);
  if (family === "mistral") {
    if (r.raw.layer_types !== undefined && r.raw.layer_types !== null)
      r.fail(
        "layer_types",
        `layer_types is not supported for MistralForCausalLM (transformers ignores it there and slides every layer); ` +
          `a config with per-layer attention types is a Ministral model`,
      );
    if (window === null) return full();
    return { layerTypes: Array<LayerType>(numLayers).fill("sliding"), slidingWindow: window };
  }
  let layerTypes: LayerType[];
  const types = r.raw.layer_types;
  if (types !== undefined && types !== null) {
    if (!Array.isArray(types) || types.length !== numLayers)
      r.fail(
        "layer_types",
        `layer_types must be a list of num_hidden_layers ${numLayers} entries (got ${show(types)})`,
      );
    layerTypes = types.map((t, i) => {
      if (t === "full_attention") return "full";
      if (t === "sliding_attention") return "sliding";
      return r.fail(
        "layer_types",
        `layer_types[${i}] ${show(t)} is not supported (supported: "full_attention", "sliding_attention")`,
      );
    });
  } else {
    const key = r.raw.sliding_window_pattern !== undefined ? "sliding_window_pattern" : "_sliding_window_pattern";
    const pattern = r.posInt(key, 6);
    layerTypes = Array.from({ length: numLayers }, (_, i) => ((i + 1) % pattern ? "sliding" : "full"));
  }
  if (window === null && layerTypes.includes("sliding"))
    r.fail("sliding_window", "sliding_window is null but layer_types has sliding_attention layers");
  return { layerTypes, slidingWindow: layerTypes.includes("sliding") ? window : null };
}

/**
 * RoPE: rope_theta and rope_scaling (transformers 4.x), or rope_parameters (5.x, which also holds rope_theta).
 * Gemma 3 has two: the full (global) layers' rope_theta (default 1e6) and rope_scaling, and the sliding (local)
 * layers' rope_local_base_freq (default 1e4) without scaling; in 5.x, rope_parameters.{full,sliding}_attention.
 */
function readRope(
  r: Reader,
  family: Family,
): { ropeTheta: number; ropeScaling: RopeScaling; localRope: { theta: number; scaling: RopeScaling } | null } {
  const params = r.raw.rope_parameters;
  const scaling = r.raw.rope_scaling;
  if (params !== undefined && params !== null && !isObject(params))
    r.fail("rope_parameters", `rope_parameters must be an object (got ${show(params)})`);
  if (scaling !== undefined && scaling !== null && !isObject(scaling))
    r.fail("rope_scaling", `rope_scaling must be an object or null (got ${show(scaling)})`);
  const gemma = family === "gemma3";
  const theta = r.positive("rope_theta", gemma ? 1e6 : 10000);
  if (gemma && isObject(params) && (params.full_attention !== undefined || params.sliding_attention !== undefined)) {
    const part = (key: string, fallback: number) => {
      const obj = params[key];
      if (obj === undefined || obj === null) return { theta: fallback, scaling: { type: "none" } as RopeScaling };
      if (!isObject(obj))
        r.fail(`rope_parameters.${key}`, `rope_parameters.${key} must be an object (got ${show(obj)})`);
      const t = r.positive("rope_theta", fallback, obj, `rope_parameters.${key}.`);
      return { theta: t, scaling: readRopeScaling(r, obj, `rope_parameters.${key}.`) };
    };
    const global = part("full_attention", theta);
    const local = part("sliding_attention", r.positive("rope_local_base_freq", 10000));
    return { ropeTheta: global.theta, ropeScaling: global.scaling, localRope: local };
  }
  let ropeTheta = theta;
  let ropeScaling: RopeScaling = { type: "none" };
  if (isObject(params)) {
    ropeTheta = r.positive("rope_theta", ropeTheta, params, "rope_parameters.");
    ropeScaling = readRopeScaling(r, params, "rope_parameters.");
  }
  if (ropeScaling.type === "none" && isObject(scaling)) ropeScaling = readRopeScaling(r, scaling, "rope_scaling.");
  const localRope = gemma
    ? { theta: r.positive("rope_local_base_freq", 10000), scaling: { type: "none" } as const }
    : null;
  return { ropeTheta, ropeScaling, localRope };
}

/** The scaling an HF rope dict describes (its rope_type or type): none (absent or "default"), linear or llama3. */
function readRopeScaling(r: Reader, obj: Json, prefix: string): RopeScaling {
  const typeKey = obj.rope_type !== undefined ? "rope_type" : "type";
  const type = obj[typeKey];
  if (type === "default" || type === undefined) return { type: "none" };
  if (type !== "llama3" && type !== "linear")
    r.fail(prefix + typeKey, `${prefix}${typeKey} ${show(type)} is not supported (supported: none, linear, llama3)`);
  for (const k of Object.keys(obj))
    if (!ROPE_KEYS[type].has(k))
      r.fail(prefix + k, `${prefix}${k} is not supported for ${type} rope scaling (value ${show(obj[k])})`);
  const need = (k: string): number => {
    if (obj[k] === undefined) r.fail(prefix + k, `${prefix}${k} is missing (${type} rope scaling needs it)`);
    return r.positive(k, 0, obj, prefix);
  };
  if (type === "linear") return { type: "linear", factor: need("factor") };
  const ropeScaling: RopeScaling = {
    type: "llama3",
    factor: need("factor"),
    lowFreqFactor: need("low_freq_factor"),
    highFreqFactor: need("high_freq_factor"),
    originalMaxPositionEmbeddings: need("original_max_position_embeddings"),
  };
  if (ropeScaling.highFreqFactor <= ropeScaling.lowFreqFactor)
    r.fail(prefix + "high_freq_factor", `${prefix}high_freq_factor must be greater than low_freq_factor`);
  return ropeScaling;
}

function readDtype(r: Reader): TorchDtype | null {
  const field = r.raw.torch_dtype !== undefined ? "torch_dtype" : "dtype";
  const v = r.raw[field];
  if (v === undefined || v === null) return null;
  if (v === "float32" || v === "float16" || v === "bfloat16") return v;
  r.fail(field, `${field} ${show(v)} is not supported (supported: float32, float16, bfloat16)`);
}
