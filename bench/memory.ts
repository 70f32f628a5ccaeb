// `npm run bench -- memory`: the memory planner against the engine's accounting. For each model, the planned
// and the measured peak live bytes of the largest inference step and of a LoRA GRPO step (rank 8, all
// targets), with recompute off and on, and the step time with recompute on over off. Real shapes (full width
// and vocabulary, random bf16 weights) run with 2 layers; the plan's per-layer term extrapolates to full depth.
// On a CPU device (SwiftShader) the GRPO step is 2 x 64 tokens instead of 8 x 512 (too slow otherwise).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import {
  Engine,
  LORA_TARGETS,
  measureGrpoStep,
  measureInference,
  parseConfig,
  planMemory,
  tensorShapes,
  writeSafetensors,
  type PlanSetup,
} from "@webart/engine";
import { isCpuDevice } from "@webart/gpu";
import { Rng, toBf16 } from "@webart/gpu";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";

const TINY = join(fileURLToPath(new URL(".", import.meta.url)), "../models/webart-tiny");
const GiB = 2 ** 30;

/** Real configs (from their config.json), with the layer count the bench runs. */
const REAL: Record<string, Record<string, unknown>> = {
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

function configJson(name: string, layers?: number): Record<string, unknown> {
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

/** A model folder in memory: the config, the embedded model's tokenizer, random bf16 weights (uniform, scaled like N(0, 0.02)). */
function memoryModel(json: Record<string, unknown>): Map<string, Blob> {
  const c = parseConfig(json);
  const rng = new Rng(7);
  const tensors = [...tensorShapes(c)].map(([name, shape]: [string, number[]]) => {
    const n = shape.reduce((a: number, b: number) => a * b, 1);
    if (shape.length === 1)
      return { name, dtype: "F32" as const, shape, data: new Float32Array(n).fill(name.endsWith("bias") ? 0 : 1) };
    const u = new Uint16Array(n);
    for (let i = 0; i < n; i++) u[i] = toBf16((rng.next() * 2 - 1) * 0.035);
    return { name, dtype: "BF16" as const, shape, data: u };
  });
  const files = new Map<string, Blob>();
  files.set("config.json", new Blob([JSON.stringify(json)]));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) files.set(f, new Blob([readFileSync(join(TINY, f))]));
  files.set("model.safetensors", new Blob([writeSafetensors(tensors, { format: "pt" })]));
  return files;
}

export const memorySuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const out: BenchResult[] = [];
  const cpu = isCpuDevice(ctx.gpu);
  const [B, T] = cpu || ctx.quick ? [2, 64] : [8, 512];
  const kvSlots = 8;
  const maxContext = 1024;
  const prefillChunk = 256;
  const all = ["webart-tiny", "webart-20m", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b", "qwen2.5-1.5b"];
  // WEBART_BENCH_MODELS=a,b runs only those (the real shapes take minutes each on a CPU device).
  const only = process.env.WEBART_BENCH_MODELS?.split(",").map((s) => s.trim());
  const names = only ? all.filter((n) => only.includes(n)) : ctx.quick ? all.slice(0, 2) : all;
  ctx.log(
    `GRPO step: ${B} x ${T} tokens, LoRA rank 8 on ${LORA_TARGETS.join(",")}; KV ${kvSlots} x ${maxContext}, prefill chunk ${prefillChunk}`,
  );
  ctx.log(
    `${"model".padEnd(14)} ${"phase".padEnd(16)} ${"plan MiB".padStart(9)} ${"measured".padStart(9)} ${"ratio".padStart(6)}  ${"act. plan".padStart(9)} ${"act. meas".padStart(9)} ${"ratio".padStart(6)}  time s`,
  );
  for (const name of names) {
    const real = name !== "webart-tiny" && name !== "webart-20m";
    const source = name === "webart-tiny" ? TINY : memoryModel(configJson(name, real ? 2 : undefined));
    const engine = await Engine.load(source, { gpu: ctx.gpu, kvSlots, maxContext, prefillChunk, name });
    try {
      engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
      const c = engine.config;
      const setup: PlanSetup = {
        weightBytes: c.torchDtype === "float32" ? 4 : 2,
        kvSlots,
        kvContext: maxContext,
        prefillChunk,
        vocabChunk: 8192,
        lora: { rank: 8, targets: LORA_TARGETS },
      };
      const row = (phase: string, plan: number, meas: number, actPlan: number, actMeas: number, s?: number) => {
        const mib = (b: number) => (b / 2 ** 20).toFixed(1).padStart(9);
        ctx.log(
          `${name.padEnd(14)} ${phase.padEnd(16)} ${mib(plan)} ${mib(meas)} ${(meas / plan).toFixed(3).padStart(6)}  ${mib(actPlan)} ${mib(actMeas)} ${(actMeas / actPlan).toFixed(3).padStart(6)}  ${s?.toFixed(2) ?? ""}`,
        );
        out.push({
          id: `memory.${name}.${phase}.measured_over_plan`,
          value: meas / plan,
          unit: "x",
          note: `plan ${(plan / 2 ** 20).toFixed(1)} MiB, measured ${(meas / 2 ** 20).toFixed(1)} MiB`,
        });
        out.push({
          id: `memory.${name}.${phase}.activations_measured_over_plan`,
          value: actMeas / actPlan,
          unit: "x",
          note: `above weights, adapter, optimizer and KV cache: plan ${actPlan} B, measured ${actMeas} B`,
        });
      };
      const inf = planMemory(c, setup);
      const before = ctx.gpu.pool.stats.liveBytes;
      const mi = await measureInference(engine, prefillChunk);
      row("inference", inf.peakInference, mi.peak, inf.inference, mi.peak - before);
      const times: Record<string, number> = {};
      for (const recompute of [false, true]) {
        const p = planMemory(c, { ...setup, train: { microBatchTokens: B * T, recompute } });
        // A first step allocates the optimizer state; the measured one is the second.
        await measureGrpoStep(engine, { batch: B, length: T, microBatchTokens: B * T, recompute, vocabChunk: 8192 });
        const held = ctx.gpu.pool.stats.liveBytes;
        const m = await measureGrpoStep(engine, {
          batch: B,
          length: T,
          microBatchTokens: B * T,
          recompute,
          vocabChunk: 8192,
        });
        const phase = `grpo.${recompute ? "recompute" : "keep"}`;
        times[phase] = m.ms / 1000;
        row(phase, p.peakTraining, m.peak, p.training, m.peak - held, m.ms / 1000);
        if (real) {
          // Every further layer adds its weights, KV cache, LoRA + optimizer state and (kept) activations.
          const full = parseConfig(configJson(name));
          const pf = planMemory(full, { ...setup, train: { microBatchTokens: B * T, recompute } });
          const extra = full.numLayers - c.numLayers;
          const perLayer = (pf.peakTraining - p.peakTraining) / extra;
          ctx.log(
            `${"".padEnd(14)} at full depth (${full.numLayers} layers): ${(pf.peakTraining / GiB).toFixed(2)} GiB planned = 2-layer peak + ${extra} x ${(perLayer / 2 ** 20).toFixed(1)} MiB a layer (activations ${(pf.trainingPerLayer / 2 ** 20).toFixed(1)})`,
          );
          out.push({
            id: `memory.${name}.full.${phase}.plan_gib`,
            value: pf.peakTraining / GiB,
            unit: "GiB",
            note: `${full.numLayers} layers; ${(perLayer / 2 ** 20).toFixed(1)} MiB a layer`,
          });
        }
      }
      out.push({
        id: `memory.${name}.recompute_over_keep.time`,
        value: times["grpo.recompute"] / times["grpo.keep"],
        unit: "x",
        note: `${B}x${T} tokens`,
      });
      ctx.log(
        `${"".padEnd(14)} step time recompute / keep: ${(times["grpo.recompute"] / times["grpo.keep"]).toFixed(2)}`,
      );
    } finally {
      await engine.close();
    }
  }
  return out;
};
export default memorySuite;
