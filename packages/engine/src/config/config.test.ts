// config.json parsing for the five families, the weight shapes they imply, and the errors for unsupported math.
// The configs are the published ones (abridged to fields that matter); parameter counts are the model cards', or
// (Mistral, Gemma 3) those of transformers 5.18's own classes built from these configs on the meta device.
import { describe, expect, it } from "vitest";
import { ConfigError, describeConfig, parameterCount, parseConfig, tensorShapes } from "./index.ts";

const qwen3 = {
  architectures: ["Qwen3ForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: "silu",
  hidden_size: 1024,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: "qwen3",
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  use_sliding_window: false,
  vocab_size: 151936,
};
const qwen25 = {
  architectures: ["Qwen2ForCausalLM"],
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151643,
  hidden_act: "silu",
  hidden_size: 896,
  intermediate_size: 4864,
  max_position_embeddings: 32768,
  max_window_layers: 21,
  model_type: "qwen2",
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 32768,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  use_sliding_window: false,
  vocab_size: 151936,
};
const llama32 = {
  architectures: ["LlamaForCausalLM"],
  attention_bias: false,
  bos_token_id: 128000,
  eos_token_id: [128001, 128008, 128009],
  head_dim: 64,
  hidden_act: "silu",
  hidden_size: 2048,
  intermediate_size: 8192,
  max_position_embeddings: 131072,
  mlp_bias: false,
  model_type: "llama",
  num_attention_heads: 32,
  num_hidden_layers: 16,
  num_key_value_heads: 8,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: {
    factor: 32.0,
    high_freq_factor: 4.0,
    low_freq_factor: 1.0,
    original_max_position_embeddings: 8192,
    rope_type: "llama3",
  },
  rope_theta: 500000.0,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  vocab_size: 128256,
};
const smollm2 = {
  architectures: ["LlamaForCausalLM"],
  bos_token_id: 0,
  eos_token_id: 0,
  hidden_act: "silu",
  hidden_size: 576,
  intermediate_size: 1536,
  max_position_embeddings: 8192,
  model_type: "llama",
  num_attention_heads: 9,
  num_hidden_layers: 30,
  num_key_value_heads: 3,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 100000,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  vocab_size: 49152,
};

const mistral03 = {
  architectures: ["MistralForCausalLM"],
  attention_dropout: 0.0,
  bos_token_id: 1,
  eos_token_id: 2,
  hidden_act: "silu",
  hidden_size: 4096,
  initializer_range: 0.02,
  intermediate_size: 14336,
  max_position_embeddings: 32768,
  model_type: "mistral",
  num_attention_heads: 32,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 1000000.0,
  sliding_window: null,
  tie_word_embeddings: false,
  torch_dtype: "bfloat16",
  transformers_version: "4.42.0.dev0",
  use_cache: true,
  vocab_size: 32768,
};
// gemma-3-1b-it: sliding_window_pattern (no layer_types), 4.x rope fields.
const gemma3_1b = {
  architectures: ["Gemma3ForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  attn_logit_softcapping: null,
  bos_token_id: 2,
  cache_implementation: "hybrid",
  eos_token_id: [1, 106],
  final_logit_softcapping: null,
  head_dim: 256,
  hidden_activation: "gelu_pytorch_tanh",
  hidden_size: 1152,
  initializer_range: 0.02,
  intermediate_size: 6912,
  max_position_embeddings: 32768,
  model_type: "gemma3_text",
  num_attention_heads: 4,
  num_hidden_layers: 26,
  num_key_value_heads: 1,
  pad_token_id: 0,
  query_pre_attn_scalar: 256,
  rms_norm_eps: 1e-6,
  rope_local_base_freq: 10000,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: 512,
  sliding_window_pattern: 6,
  torch_dtype: "bfloat16",
  transformers_version: "4.50.0.dev0",
  use_cache: true,
  vocab_size: 262144,
};
const gemmaTypes = (n: number) =>
  Array.from({ length: n }, (_, i) => ((i + 1) % 6 ? "sliding_attention" : "full_attention"));
// gemma-3-270m: layer_types.
const gemma3_270m = {
  ...gemma3_1b,
  sliding_window_pattern: undefined,
  _sliding_window_pattern: 6,
  hidden_size: 640,
  intermediate_size: 2048,
  num_hidden_layers: 18,
  eos_token_id: 1,
  layer_types: gemmaTypes(18),
  use_bidirectional_attention: false,
};

describe("parseConfig", () => {
  it("reads Qwen3-0.6B: q/k norm, head_dim apart from hidden/heads, tied embeddings", () => {
    const c = parseConfig(JSON.stringify(qwen3));
    expect(c).toMatchObject({
      family: "qwen3",
      headDim: 128,
      numHeads: 16,
      numKvHeads: 8,
      qkNorm: true,
      qkvBias: false,
    });
    expect(c).toMatchObject({
      tieWordEmbeddings: true,
      eosTokenIds: [151645],
      bosTokenId: 151643,
      torchDtype: "bfloat16",
    });
    expect(c.ropeScaling).toEqual({ type: "none" });
    expect(parameterCount(c)).toBe(596_049_920);
    const shapes = tensorShapes(c);
    expect(shapes.get("model.layers.0.self_attn.q_proj.weight")).toEqual([16 * 128, 1024]);
    expect(shapes.get("model.layers.27.self_attn.k_norm.weight")).toEqual([128]);
    expect(shapes.get("model.layers.0.self_attn.o_proj.weight")).toEqual([1024, 16 * 128]);
    expect(shapes.has("lm_head.weight")).toBe(false);
    expect(shapes.has("model.layers.0.self_attn.q_proj.bias")).toBe(false);
    expect(shapes.size).toBe(2 + 28 * 11);
    expect(describeConfig(c)).toContain("596.0M parameters");
  });

  it("reads Qwen2.5-0.5B: q/k/v bias but no o_proj bias, inactive sliding window", () => {
    const c = parseConfig(qwen25);
    expect(c).toMatchObject({ family: "qwen2", qkvBias: true, oBias: false, qkNorm: false, headDim: 64 });
    expect(parameterCount(c)).toBe(494_032_768);
    const shapes = tensorShapes(c);
    expect(shapes.get("model.layers.3.self_attn.k_proj.bias")).toEqual([2 * 64]);
    expect(shapes.has("model.layers.3.self_attn.o_proj.bias")).toBe(false);
  });

  it("reads Llama-3.2-1B: llama3 rope scaling and a list of eos ids", () => {
    const c = parseConfig(llama32);
    expect(c.ropeScaling).toEqual({
      type: "llama3",
      factor: 32,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    });
    expect(c.eosTokenIds).toEqual([128001, 128008, 128009]);
    expect(c.rmsNormEps).toBe(1e-5);
    expect(parameterCount(c)).toBe(1_235_814_400);
  });

  it("reads SmolLM2-135M, and an untied config gets lm_head", () => {
    const c = parseConfig(smollm2);
    expect(c).toMatchObject({ family: "llama", headDim: 64, maxPositionEmbeddings: 8192 });
    expect(parameterCount(c)).toBe(134_515_008);
    const untied = parseConfig({ ...smollm2, tie_word_embeddings: false });
    expect(tensorShapes(untied).get("lm_head.weight")).toEqual([49152, 576]);
    expect(parameterCount(untied) - parameterCount(c)).toBe(49152 * 576);
  });

  it("takes rope_theta and llama3 scaling from transformers 5's rope_parameters", () => {
    const { rope_scaling: scaling, rope_theta: theta, ...rest } = llama32;
    const c = parseConfig({ ...rest, rope_parameters: { ...scaling, rope_theta: theta } });
    expect(c.ropeTheta).toBe(500000);
    expect(c.ropeScaling.type).toBe("llama3");
    const plain = parseConfig({
      ...qwen3,
      rope_theta: undefined,
      rope_parameters: { rope_type: "default", rope_theta: 5e6 },
    });
    expect(plain.ropeTheta).toBe(5e6);
    expect(plain.ropeScaling).toEqual({ type: "none" });
  });

  it("reads Mistral-7B-v0.3: Llama math, no sliding window, rope_theta 1e6", () => {
    const c = parseConfig(mistral03);
    expect(c).toMatchObject({
      family: "mistral",
      architecture: "MistralForCausalLM",
      headDim: 128,
      numKvHeads: 8,
      ropeTheta: 1e6,
      qkvBias: false,
      qkNorm: false,
      slidingWindow: null,
      localRope: null,
      hiddenAct: "silu",
      embedScale: 1,
      normUnitOffset: false,
      sandwichNorms: false,
      tieWordEmbeddings: false,
    });
    expect(c.layerTypes).toEqual(Array(32).fill("full"));
    expect(c.attnScale).toBe(1 / Math.sqrt(128));
    expect(parameterCount(c)).toBe(7_248_023_552);
    // Mistral-Nemo's head_dim 128 differs from hidden_size / heads = 160.
    expect(parseConfig({ ...mistral03, hidden_size: 5120, head_dim: 128 }).headDim).toBe(128);
    // MistralForCausalLM has no biases: transformers ignores attention_bias there.
    expect(parseConfig({ ...mistral03, attention_bias: true }).qkvBias).toBe(false);
  });

  it("Mistral v0.1's sliding_window slides every layer; absent means transformers' default 4096", () => {
    const v01 = parseConfig({ ...mistral03, sliding_window: 4096, rope_theta: 10000 });
    expect(v01.slidingWindow).toBe(4096);
    expect(v01.layerTypes).toEqual(Array(32).fill("sliding"));
    expect(describeConfig(v01)).toContain("sliding window 4096 on 32 of 32 layers");
    const { sliding_window: _, ...noField } = mistral03;
    expect(parseConfig(noField).slidingWindow).toBe(4096);
  });

  it("reads gemma-3-1b: five local layers per global one, two RoPE bases, Gemma's norms and scales", () => {
    const c = parseConfig(gemma3_1b);
    expect(c).toMatchObject({
      family: "gemma3",
      architecture: "Gemma3ForCausalLM",
      headDim: 256,
      numHeads: 4,
      numKvHeads: 1,
      qkNorm: true,
      qkvBias: false,
      hiddenAct: "gelu_tanh",
      normUnitOffset: true,
      sandwichNorms: true,
      tieWordEmbeddings: true, // Gemma3TextConfig's default: the file does not say
      slidingWindow: 512,
      ropeTheta: 1e6,
      ropeScaling: { type: "none" },
      localRope: { theta: 10000, scaling: { type: "none" } },
      eosTokenIds: [1, 106],
    });
    expect(c.embedScale).toBe(Math.sqrt(1152));
    expect(c.attnScale).toBe(1 / 16);
    expect(c.layerTypes.map((t) => (t === "full" ? "full_attention" : "sliding_attention"))).toEqual(gemmaTypes(26));
    expect(parameterCount(c)).toBe(999_885_952);
    const shapes = tensorShapes(c);
    for (const n of ["input", "post_attention", "pre_feedforward", "post_feedforward"])
      expect(shapes.get(`model.layers.25.${n}_layernorm.weight`)).toEqual([1152]);
    expect(shapes.get("model.layers.0.self_attn.q_norm.weight")).toEqual([256]);
    expect(shapes.get("model.layers.0.self_attn.q_proj.weight")).toEqual([4 * 256, 1152]);
    expect(shapes.has("lm_head.weight")).toBe(false);
    expect(describeConfig(c)).toContain("sliding window 512 on 22 of 26 layers");
  });

  it("reads gemma-3-270m's layer_types, and transformers 5's rope_parameters per layer type", () => {
    const c = parseConfig(gemma3_270m);
    expect(c.layerTypes.filter((t) => t === "full").length).toBe(3);
    expect(parameterCount(c)).toBe(268_098_176);
    // save_pretrained in transformers 5.18 writes rope_parameters keyed by layer type (and drops the 4.x fields).
    const v5 = parseConfig({
      ...gemma3_270m,
      rope_theta: undefined,
      rope_local_base_freq: undefined,
      rope_scaling: undefined,
      rope_parameters: {
        sliding_attention: { rope_type: "default", rope_theta: 10000 },
        full_attention: { rope_type: "linear", factor: 8.0, rope_theta: 1000000 },
      },
    });
    expect(v5.ropeTheta).toBe(1e6);
    expect(v5.ropeScaling).toEqual({ type: "linear", factor: 8 });
    expect(v5.localRope).toEqual({ theta: 10000, scaling: { type: "none" } });
    // Gemma 3 4B's text config: linear scaling on the global layers only.
    const linear = parseConfig({ ...gemma3_1b, rope_scaling: { factor: 8.0, rope_type: "linear" } });
    expect(linear.ropeScaling).toEqual({ type: "linear", factor: 8 });
    expect(linear.localRope).toEqual({ theta: 10000, scaling: { type: "none" } });
    // Without query_pre_attn_scalar and head_dim: Gemma3TextConfig's defaults (256 both).
    const bare = parseConfig({ ...gemma3_1b, query_pre_attn_scalar: undefined, head_dim: undefined });
    expect([bare.headDim, bare.attnScale]).toEqual([256, 1 / 16]);
    expect(parseConfig({ ...gemma3_1b, query_pre_attn_scalar: 144 }).attnScale).toBe(144 ** -0.5);
  });

  it("attention_bias on Qwen3 and Llama puts a bias on all four projections", () => {
    const c = parseConfig({ ...qwen3, attention_bias: true });
    expect(c).toMatchObject({ qkvBias: true, oBias: true });
    expect(tensorShapes(c).get("model.layers.0.self_attn.o_proj.bias")).toEqual([1024]);
  });
});

describe("parseConfig errors", () => {
  const fails = (json: object | string, file = "config.json") => {
    try {
      parseConfig(json, file);
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      return (e as Error).message;
    }
    throw new Error("parseConfig accepted a config it should reject");
  };

  it("names file, field, value and the supported values", () => {
    const yarn = { ...qwen25, rope_scaling: { type: "yarn", factor: 4, original_max_position_embeddings: 32768 } };
    expect(fails(yarn)).toBe(
      'config.json: rope_scaling.type "yarn" is not supported (supported: none, linear, llama3)',
    );
    expect(fails({ ...smollm2, hidden_act: "gelu" }, "models/x/config.json")).toBe(
      'models/x/config.json: hidden_act "gelu" is not supported (supported: silu)',
    );
    expect(fails({ ...llama32, mlp_bias: true })).toBe(
      "config.json: mlp_bias true is not supported (supported: false)",
    );
    expect(fails({ ...llama32, rope_scaling: { ...llama32.rope_scaling, rope_type: "dynamic" } })).toContain(
      'rope_scaling.rope_type "dynamic" is not supported (supported: none, linear, llama3)',
    );
  });

  it("rejects a sliding window that is active, and only then", () => {
    const active = { ...qwen25, use_sliding_window: true, sliding_window: 4096, max_window_layers: 21 };
    expect(fails(active)).toMatch(/^config\.json: sliding_window 4096 with use_sliding_window true is not supported/);
    expect(() => parseConfig({ ...active, sliding_window: 32768 })).not.toThrow(); // window covers the whole context
    expect(() => parseConfig({ ...active, max_window_layers: 24 })).not.toThrow(); // every layer is full attention
    expect(() => parseConfig({ ...active, layer_types: Array(24).fill("full_attention") })).not.toThrow();
  });

  it("rejects unknown families and architectures", () => {
    expect(fails({ ...smollm2, model_type: "gemma2", architectures: undefined })).toContain(
      'model_type "gemma2" is not supported (supported: llama, mistral, qwen2, qwen3, gemma3_text)',
    );
    expect(fails({ ...smollm2, architectures: ["GPT2LMHeadModel"] })).toContain(
      'architectures "GPT2LMHeadModel" is not supported (supported: LlamaForCausalLM, MistralForCausalLM, ' +
        "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM)",
    );
    expect(fails({ ...gemma3_1b, architectures: ["Gemma3ForConditionalGeneration"] })).toBe(
      "config.json: multimodal Gemma 3 checkpoints (4B and up, weights under language_model.*) are not supported; " +
        "text-only Gemma3ForCausalLM checkpoints (gemma-3-270m, gemma-3-1b) are",
    );
    expect(fails({ ...gemma3_1b, architectures: undefined, model_type: "gemma3" })).toContain(
      "multimodal Gemma 3 checkpoints (model_type gemma3, 4B and up) are not supported",
    );
    expect(fails({ ...smollm2, model_type: "qwen3" })).toContain("disagrees with architectures");
  });

  it("rejects malformed or inconsistent sizes", () => {
    expect(fails("{not json")).toMatch(/^config\.json: not valid JSON/);
    expect(fails({ ...smollm2, hidden_size: undefined })).toBe("config.json: hidden_size is missing");
    expect(fails({ ...smollm2, num_hidden_layers: 2.5 })).toContain(
      "num_hidden_layers must be a positive integer (got 2.5)",
    );
    expect(fails({ ...smollm2, num_key_value_heads: 4 })).toContain(
      "num_attention_heads 9 is not a multiple of num_key_value_heads 4",
    );
    expect(fails({ ...smollm2, hidden_size: 577 })).toContain("not a multiple of num_attention_heads");
    expect(fails({ ...smollm2, torch_dtype: "float8_e4m3fn" })).toContain(
      'torch_dtype "float8_e4m3fn" is not supported',
    );
  });

  it("rejects Gemma math it does not implement, naming field and value", () => {
    expect(fails({ ...gemma3_1b, final_logit_softcapping: 30.0 })).toBe(
      "config.json: final_logit_softcapping 30 is not supported (supported: null)",
    );
    expect(fails({ ...gemma3_1b, attn_logit_softcapping: 50.0 })).toBe(
      "config.json: attn_logit_softcapping 50 is not supported (supported: null)",
    );
    expect(fails({ ...gemma3_1b, hidden_activation: "gelu" })).toBe(
      'config.json: hidden_activation "gelu" is not supported (supported: "gelu_pytorch_tanh")',
    );
    expect(fails({ ...gemma3_270m, use_bidirectional_attention: true })).toBe(
      "config.json: use_bidirectional_attention true is not supported (supported: false)",
    );
    expect(fails({ ...gemma3_270m, layer_types: ["chunked_attention", ...gemmaTypes(17)] })).toBe(
      'config.json: layer_types[0] "chunked_attention" is not supported (supported: "full_attention", "sliding_attention")',
    );
    expect(fails({ ...gemma3_270m, layer_types: gemmaTypes(17) })).toContain(
      "layer_types must be a list of num_hidden_layers 18 entries",
    );
    expect(fails({ ...gemma3_1b, sliding_window: null })).toContain(
      "sliding_window is null but layer_types has sliding_attention layers",
    );
    expect(fails({ ...mistral03, layer_types: Array(32).fill("full_attention") })).toContain(
      "layer_types is not supported for MistralForCausalLM",
    );
    expect(fails({ ...smollm2, rope_interleaved: true })).toBe(
      "config.json: rope_interleaved true is not supported (supported: false)",
    );
  });

  it("rejects other math it does not implement", () => {
    expect(fails({ ...qwen3, quantization_config: { quant_method: "awq" } })).toContain(
      'quantized checkpoints ("awq")',
    );
    expect(fails({ ...qwen3, attention_dropout: 0.1 })).toContain("attention_dropout 0.1 is not supported");
    const { low_freq_factor: _, ...partial } = llama32.rope_scaling;
    expect(fails({ ...llama32, rope_scaling: partial })).toContain("rope_scaling.low_freq_factor is missing");
    expect(fails({ ...llama32, rope_scaling: { ...llama32.rope_scaling, mrope_section: [1] } })).toContain(
      "rope_scaling.mrope_section is not supported",
    );
  });
});
