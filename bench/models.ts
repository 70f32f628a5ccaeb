// Real model shapes for the benches (their config.json's fields that matter here) and model folders of those shapes
// with random weights, made in memory: the memory suite runs them at 2 layers, the gpu suite at full depth.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseConfig, tensorShapes, writeSafetensors } from "@webart/engine";
import { Rng, toBf16 } from "@webart/gpu";

export const TINY = join(fileURLToPath(new URL(".", import.meta.url)), "../models/webart-tiny");

export const REAL: Record<string, Record<string, unknown>> = {
  "qwen2.5-0.5b": {
    architectures: ["Qwen2ForCausalLM"],
    model_type: "qwen2",
    hidden_size: 896,
    intermediate_size: 4864,
    num_attention_heads: 14,
    num_hidden_layers: 24,
    num_key_value_heads: 2,
    rms_norm_eps: 1e-6,
    rope_theta: 1e6,
    tie_word_embeddings: true,
    vocab_size: 151936,
  },
  "qwen3-0.6b": {
    architectures: ["Qwen3ForCausalLM"],
    model_type: "qwen3",
    hidden_size: 1024,
    intermediate_size: 3072,
    num_attention_heads: 16,
    num_hidden_layers: 28,
    num_key_value_heads: 8,
    head_dim: 128,
    rms_norm_eps: 1e-6,
    rope_theta: 1e6,
    tie_word_embeddings: true,
    vocab_size: 151936,
  },
  "llama-3.2-1b": {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    hidden_size: 2048,
    intermediate_size: 8192,
    num_attention_heads: 32,
    num_hidden_layers: 16,
    num_key_value_heads: 8,
    head_dim: 64,
    rms_norm_eps: 1e-5,
    rope_theta: 500000,
    tie_word_embeddings: true,
    vocab_size: 128256,
    rope_scaling: {
      rope_type: "llama3",
      factor: 32,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    },
  },
  "qwen2.5-1.5b": {
    architectures: ["Qwen2ForCausalLM"],
    model_type: "qwen2",
    hidden_size: 1536,
    intermediate_size: 8960,
    num_attention_heads: 12,
    num_hidden_layers: 28,
    num_key_value_heads: 2,
    rms_norm_eps: 1e-6,
    rope_theta: 1e6,
    tie_word_embeddings: true,
    vocab_size: 151936,
  },
  // Gemma 3 1B: per-head q/k norms, a norm on each branch before its residual add, 5 sliding-window layers to 1 global.
  "gemma-3-1b": {
    architectures: ["Gemma3ForCausalLM"],
    model_type: "gemma3_text",
    hidden_size: 1152,
    intermediate_size: 6912,
    num_attention_heads: 4,
    num_hidden_layers: 26,
    num_key_value_heads: 1,
    head_dim: 256,
    hidden_activation: "gelu_pytorch_tanh",
    query_pre_attn_scalar: 256,
    rms_norm_eps: 1e-6,
    rope_theta: 1e6,
    rope_local_base_freq: 10000,
    sliding_window: 512,
    sliding_window_pattern: 6,
    tie_word_embeddings: true,
    vocab_size: 262144,
  },
  "webart-20m": {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    hidden_size: 384,
    intermediate_size: 1024,
    num_attention_heads: 6,
    num_hidden_layers: 8,
    num_key_value_heads: 2,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
    vocab_size: 16384,
  },
};

/** The config.json of a REAL model, with `layers` layers instead of its own where given. */
/** A real shape's depth and structure at narrow widths (hidden 128, 2 heads), with vocabulary `vocab`: as many
 *  dispatches a step as the real model, little work in each. */
export function narrowConfig(name: string, vocab: number): Record<string, unknown> {
  return {
    ...configJson(name),
    hidden_size: 128,
    intermediate_size: 256,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    vocab_size: vocab,
  };
}

export function configJson(name: string, layers?: number): Record<string, unknown> {
  const j = {
    hidden_act: "silu",
    max_position_embeddings: 32768,
    torch_dtype: "bfloat16",
    bos_token_id: 1,
    eos_token_id: 2,
    ...REAL[name],
  };
  return layers ? { ...j, num_hidden_layers: layers } : j;
}

/**
 * A model folder in memory: the config, the embedded model's tokenizer, random bf16 weights (a random block of 2^20
 * values, uniform like N(0, 0.02), repeated at a rotating offset: random-looking data at no per-value cost, so that
 * billions of weights take seconds).
 */
export function randomModelFiles(json: Record<string, unknown>): Map<string, Blob> {
  const c = parseConfig(json);
  const rng = new Rng(7);
  const block = new Uint16Array(1 << 20);
  for (let i = 0; i < block.length; i++) block[i] = toBf16((rng.next() * 2 - 1) * 0.035);
  let rot = 0;
  const tensors = [...tensorShapes(c)].map(([name, shape]: [string, number[]]) => {
    const n = shape.reduce((x: number, y: number) => x * y, 1);
    if (shape.length === 1)
      return { name, dtype: "F32" as const, shape, data: new Float32Array(n).fill(name.endsWith("bias") ? 0 : 1) };
    const u = new Uint16Array(n);
    rot = (rot + 7919) % block.length;
    for (let o = 0; o < n; o += block.length - rot) {
      u.set(block.subarray(rot, rot + Math.min(block.length - rot, n - o)), o);
    }
    return { name, dtype: "BF16" as const, shape, data: u };
  });
  const files = new Map<string, Blob>();
  files.set("config.json", new Blob([JSON.stringify(json)]));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) files.set(f, new Blob([readFileSync(join(TINY, f))]));
  files.set("model.safetensors", new Blob([writeSafetensors(tensors, { format: "pt" })]));
  return files;
}
