// Writes the embedded default model's starting point in Hugging Face layout: config.json (Llama form,
// tied embeddings) and seeded random weights in model.safetensors, next to the trained tokenizer.
//   npx tsx scripts/pretrain/init.ts --dir models/webart-tiny
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { writeSafetensors } from "@webart/engine";
import { Rng } from "@webart/gpu";
import { int, parseArgs } from "./args.ts";

const usage = "usage: init.ts --dir DIR [--hidden 128] [--layers 4] [--heads 4] [--kv-heads 2] [--ffn 384] [--context 1024] [--seed 1]";
const a = parseArgs(usage, { dir: "", hidden: "128", layers: "4", heads: "4", "kv-heads": "2", ffn: "384", context: "1024", seed: "1" });
const C = int("hidden", a.hidden);
const L = int("layers", a.layers);
const H = int("heads", a.heads);
const KV = int("kv-heads", a["kv-heads"]);
const F = int("ffn", a.ffn);
const D = C / H;
const tok = JSON.parse(readFileSync(join(a.dir, "tokenizer.json"), "utf8"));
const tokCfg = JSON.parse(readFileSync(join(a.dir, "tokenizer_config.json"), "utf8"));
const V = Object.keys(tok.model.vocab).length + tok.added_tokens.filter((t: { id: number }) => !(t.id in tok.model.vocab)).length;
const ids = new Map<string, number>(tok.added_tokens.map((t: { content: string; id: number }) => [t.content, t.id]));
const eos = ids.get("<|im_end|>")!;
const config = {
  architectures: ["LlamaForCausalLM"],
  model_type: "llama",
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: ids.get("<|endoftext|>"),
  eos_token_id: eos,
  head_dim: D,
  hidden_act: "silu",
  hidden_size: C,
  initializer_range: 0.02,
  intermediate_size: F,
  max_position_embeddings: int("context", a.context),
  mlp_bias: false,
  num_attention_heads: H,
  num_hidden_layers: L,
  num_key_value_heads: KV,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 10000.0,
  tie_word_embeddings: true,
  torch_dtype: "float32",
  use_cache: true,
  vocab_size: V,
};
const rng = new Rng(int("seed", a.seed));
const normal = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
const tensors: { name: string; dtype: "F32"; shape: number[]; data: Float32Array }[] = [];
const add = (name: string, shape: number[], data: Float32Array) => tensors.push({ name, dtype: "F32", shape, data });
const std = 0.02;
const outStd = std / Math.sqrt(2 * L); // residual projections scaled down, as GPT-2 does
add("model.embed_tokens.weight", [V, C], normal(V * C, std));
for (let i = 0; i < L; i++) {
  const p = `model.layers.${i}.`;
  add(p + "input_layernorm.weight", [C], new Float32Array(C).fill(1));
  add(p + "self_attn.q_proj.weight", [H * D, C], normal(H * D * C, std));
  add(p + "self_attn.k_proj.weight", [KV * D, C], normal(KV * D * C, std));
  add(p + "self_attn.v_proj.weight", [KV * D, C], normal(KV * D * C, std));
  add(p + "self_attn.o_proj.weight", [C, H * D], normal(C * H * D, outStd));
  add(p + "post_attention_layernorm.weight", [C], new Float32Array(C).fill(1));
  add(p + "mlp.gate_proj.weight", [F, C], normal(F * C, std));
  add(p + "mlp.up_proj.weight", [F, C], normal(F * C, std));
  add(p + "mlp.down_proj.weight", [C, F], normal(C * F, outStd));
}
add("model.norm.weight", [C], new Float32Array(C).fill(1));
writeFileSync(join(a.dir, "config.json"), JSON.stringify(config, null, 2) + "\n");
writeFileSync(join(a.dir, "generation_config.json"), JSON.stringify({ eos_token_id: [eos], bos_token_id: config.bos_token_id }, null, 2) + "\n");
writeFileSync(join(a.dir, "model.safetensors"), writeSafetensors(tensors, { format: "pt" }));
const params = tensors.reduce((s, t) => s + t.data.length, 0);
console.log(`${a.dir}: ${params} parameters (V=${V}, C=${C}, L=${L}, H=${H}, KV=${KV}, F=${F}); eos ${tokCfg.eos_token}`);
