// The model config: a Hugging Face config.json parsed into one typed object for the Llama, Qwen2 and Qwen3
// families. Every field that changes the math is either read here or rejected with a message naming it.

/** Architecture family; decides which optional pieces (QKV bias, q/k RMSNorm) the model has. */
export type Family = "llama" | "qwen2" | "qwen3";

/** Dtype the checkpoint says it was saved in (`torch_dtype`); the tensors' own dtypes are what gets loaded. */
export type TorchDtype = "float32" | "float16" | "bfloat16";

/** RoPE frequency scaling: none, or Llama 3.1's piecewise scaling of the low frequencies. */
export type RopeScaling =
  | { type: "none" }
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
  ropeTheta: number;
  ropeScaling: RopeScaling;
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
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
};
const MODEL_TYPES: Record<string, Family> = { llama: "llama", qwen2: "qwen2", qwen3: "qwen3" };
// HF's class defaults for fields a config.json may leave out.
const DEFAULT_MAX_POSITIONS: Record<Family, number> = { llama: 2048, qwen2: 32768, qwen3: 32768 };
const ROPE_KEYS = new Set([
  "type",
  "rope_type",
  "rope_theta",
  "factor",
  "low_freq_factor",
  "high_freq_factor",
  "original_max_position_embeddings",
]);

type Json = Record<string, unknown>;

const show = (v: unknown): string => (typeof v === "string" ? JSON.stringify(v) : (JSON.stringify(v) ?? String(v)));
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

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
  r.unsupported("hidden_act", (v) => v === undefined || v === "silu", "silu");
  r.unsupported("mlp_bias", (v) => v === undefined || v === false, "false");
  r.unsupported("attention_dropout", (v) => v === undefined || v === 0, "0");
  r.unsupported("partial_rotary_factor", (v) => v === undefined || v === 1, "1");
  if (raw.quantization_config !== undefined) {
    const method = isObject(raw.quantization_config) ? raw.quantization_config.quant_method : undefined;
    r.fail(
      "quantization_config",
      `quantized checkpoints (${show(method)}) are not supported; use the unquantized model`,
    );
  }

  const hiddenSize = r.posInt("hidden_size");
  const numHeads = r.posInt("num_attention_heads");
  const numKvHeads = r.posInt("num_key_value_heads", numHeads);
  if (numHeads % numKvHeads !== 0)
    r.fail(
      "num_key_value_heads",
      `num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`,
    );
  if (raw.head_dim === undefined || raw.head_dim === null) {
    if (hiddenSize % numHeads !== 0)
      r.fail(
        "head_dim",
        `hidden_size ${hiddenSize} is not a multiple of num_attention_heads ${numHeads} and head_dim is not given`,
      );
  }
  const headDim = r.posInt("head_dim", hiddenSize / numHeads);
  if (headDim % 2 !== 0) r.fail("head_dim", `head_dim ${headDim} must be even for rotary embeddings`);
  const maxPositionEmbeddings = r.posInt("max_position_embeddings", DEFAULT_MAX_POSITIONS[family]);
  const numLayers = r.posInt("num_hidden_layers");
  if (family !== "llama") checkSlidingWindow(r, numLayers, maxPositionEmbeddings);

  const attentionBias = r.bool("attention_bias", false);
  const { ropeTheta, ropeScaling } = readRope(r);
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
    ropeTheta,
    ropeScaling,
    qkvBias: family === "qwen2" ? true : attentionBias,
    oBias: family === "qwen2" ? false : attentionBias,
    qkNorm: family === "qwen3",
    tieWordEmbeddings: r.bool("tie_word_embeddings", false),
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

// rope_scaling (transformers 4.x) or rope_parameters (5.x, which also holds rope_theta).
function readRope(r: Reader): { ropeTheta: number; ropeScaling: RopeScaling } {
  const params = r.raw.rope_parameters;
  const scaling = r.raw.rope_scaling;
  let ropeTheta = r.positive("rope_theta", 10000);
  let obj: Json | undefined;
  let prefix = "rope_scaling.";
  if (isObject(params)) {
    ropeTheta = r.positive("rope_theta", ropeTheta, params, "rope_parameters.");
    const t = params.rope_type ?? params.type;
    if (t !== undefined && t !== "default") [obj, prefix] = [params, "rope_parameters."];
  } else if (params !== undefined && params !== null)
    r.fail("rope_parameters", `rope_parameters must be an object (got ${show(params)})`);
  if (!obj && scaling !== undefined && scaling !== null) {
    if (!isObject(scaling)) r.fail("rope_scaling", `rope_scaling must be an object or null (got ${show(scaling)})`);
    obj = scaling;
  }
  if (!obj) return { ropeTheta, ropeScaling: { type: "none" } };

  const typeKey = obj.rope_type !== undefined ? "rope_type" : "type";
  const type = obj[typeKey];
  if (type === "default" || type === undefined) return { ropeTheta, ropeScaling: { type: "none" } };
  if (type !== "llama3")
    r.fail(prefix + typeKey, `${prefix}${typeKey} ${show(type)} is not supported (supported: none, llama3)`);
  for (const k of Object.keys(obj))
    if (!ROPE_KEYS.has(k))
      r.fail(prefix + k, `${prefix}${k} is not supported for llama3 rope scaling (value ${show(obj[k])})`);
  const need = (k: string): number => {
    if (obj[k] === undefined) r.fail(prefix + k, `${prefix}${k} is missing (llama3 rope scaling needs it)`);
    return r.positive(k, 0, obj, prefix);
  };
  const ropeScaling: RopeScaling = {
    type: "llama3",
    factor: need("factor"),
    lowFreqFactor: need("low_freq_factor"),
    highFreqFactor: need("high_freq_factor"),
    originalMaxPositionEmbeddings: need("original_max_position_embeddings"),
  };
  if (ropeScaling.highFreqFactor <= ropeScaling.lowFreqFactor)
    r.fail(prefix + "high_freq_factor", `${prefix}high_freq_factor must be greater than low_freq_factor`);
  return { ropeTheta, ropeScaling };
}

function readDtype(r: Reader): TorchDtype | null {
  const field = r.raw.torch_dtype !== undefined ? "torch_dtype" : "dtype";
  const v = r.raw[field];
  if (v === undefined || v === null) return null;
  if (v === "float32" || v === "float16" || v === "bfloat16") return v;
  r.fail(field, `${field} ${show(v)} is not supported (supported: float32, float16, bfloat16)`);
}
