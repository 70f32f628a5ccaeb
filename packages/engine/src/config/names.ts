// The Hugging Face tensor names of a checkpoint, in one place. Loading (model/weights.ts), shapes and random init
// (config/shapes.ts, model/init.ts), the planner, full fine-tuning's weight gradients (model.ts, train/sft.ts) and
// PEFT's adapter names (model/peft.ts, model/lora.ts) all take their names from here.
import type { LoraTarget } from "../plan.ts";

export const EMBED = "model.embed_tokens.weight";
export const FINAL_NORM = "model.norm.weight";
export const LM_HEAD = "lm_head.weight";

/** The module path of each linear projection inside a decoder layer (the LoRA targets are these projections). */
export const PROJECTIONS: Record<LoraTarget, string> = {
  q: "self_attn.q_proj",
  k: "self_attn.k_proj",
  v: "self_attn.v_proj",
  o: "self_attn.o_proj",
  gate: "mlp.gate_proj",
  up: "mlp.up_proj",
  down: "mlp.down_proj",
};

/** The module path of each RMSNorm inside a decoder layer. Llama's post_attention_layernorm is the MLP's input
 *  norm; Gemma's sandwich layers norm the attention output with it and the MLP's input and output with the two
 *  feedforward norms. q_norm and k_norm are Qwen3's and Gemma 3's per-head norms. */
export const NORMS = {
  input: "input_layernorm",
  postAttention: "post_attention_layernorm",
  preFeedforward: "pre_feedforward_layernorm",
  postFeedforward: "post_feedforward_layernorm",
  q: "self_attn.q_norm",
  k: "self_attn.k_norm",
} as const;

/** `model.layers.{i}.{module}`: a module of decoder layer i (the name PEFT's patterns match). */
export const layerModule = (i: number, module: string): string => `model.layers.${i}.${module}`;

/** `model.layers.{i}.{module}.weight` (or `.bias`): a tensor of decoder layer i. */
export const layerTensor = (i: number, module: string, kind: "weight" | "bias" = "weight"): string =>
  `${layerModule(i, module)}.${kind}`;
