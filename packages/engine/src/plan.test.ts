import { expect, it } from "vitest";
import { parseConfig, parameterCount } from "./config/index.ts";
import { checkPlan, LORA_TARGETS, loraParameterCount, planMemory, planTraining } from "./plan.ts";
import { bucketSize } from "@webart/gpu";

const qwen05 = parseConfig({
  architectures: ["Qwen2ForCausalLM"],
  model_type: "qwen2",
  hidden_act: "silu",
  hidden_size: 896,
  intermediate_size: 4864,
  max_position_embeddings: 32768,
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1e6,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  vocab_size: 151936,
  use_sliding_window: false,
  sliding_window: 32768,
  bos_token_id: 151643,
  eos_token_id: 151643,
});

/** Qwen2.5-0.5B in 16 bits, LoRA rank 8 on every projection, 4096-token micro-batches with recompute. */
const setup = {
  weightBytes: 2 as const,
  kvSlots: 8,
  kvContext: 1024,
  prefillChunk: 256,
  vocabChunk: 8192,
  lora: { rank: 8, targets: LORA_TARGETS },
  train: { microBatchTokens: 4096, recompute: true },
};

it("states weights, LoRA and KV bytes from the config, and refuses what does not fit", () => {
  const p = planMemory(qwen05, setup);
  // Matrices in 16 bits, the few 1-D tensors in f32: within 1% of 2 bytes per parameter.
  expect(Math.abs(p.weights / (2 * parameterCount(qwen05)) - 1)).toBeLessThan(0.01);
  expect(loraParameterCount(qwen05, 8, LORA_TARGETS)).toBe(
    24 * 8 * (2 * 896 + 2 * (896 + 128) + 2 * 896 + 3 * (896 + 4864)),
  );
  expect(p.kvCache).toBe(2 * 24 * 8 * 1024 * 2 * 64 * 4);
  expect(p.total).toBeLessThan(3e9);
  const noRecompute = planMemory(qwen05, { ...setup, train: { microBatchTokens: 4096, recompute: false } });
  expect(noRecompute.training).toBeGreaterThan(4 * p.training);
  expect(() => checkPlan(noRecompute, { maxStorageBufferBindingSize: 2 ** 30, maxBufferSize: 2 ** 30 }, 3e9)).toThrow(
    /budget is 2.79 GiB/,
  );
  expect(() => checkPlan(p, { maxStorageBufferBindingSize: 64 * 2 ** 20, maxBufferSize: 2 ** 30 })).toThrow(
    /storage binding/,
  );
});

it("rows with allowed sets (a constrained sampler's) add a header word and a vocabulary bitmask per token", () => {
  const plain = planMemory(qwen05, setup);
  const sets = planMemory(qwen05, { ...setup, train: { ...setup.train, allowedSets: true } });
  const words = Math.ceil(151936 / 32);
  // At the worst, every row its own set: 4096 x (1 + 4748) words, ~74 MiB, rounded up to the pool's bucket.
  const added = sets.training - plain.training;
  expect(added).toBe(bucketSize(4096 * (1 + words) * 4));
  expect(sets.total - plain.total).toBe(added);
});

it("counts gate|up as one binding, names the binding that does not fit, and plans a short step at what it holds", () => {
  const limits = { maxStorageBufferBindingSize: 2 ** 30, maxBufferSize: 2 ** 30 };
  const p = planMemory(qwen05, setup);
  // gate|up is one product (2 x 4864 columns): a 4096-token micro-batch's is 152 MiB, more than its logits chunk.
  expect(p.largestBinding).toBe(4096 * 2 * 4864 * 4);
  expect(p.largestWhat).toBe("the widest activation of a 4096-token micro-batch");
  const bind = 4096 * 2 * 4864 * 4 - 1;
  expect(() => checkPlan(p, { maxStorageBufferBindingSize: bind, maxBufferSize: 2 ** 30 })).toThrow(
    "memory plan: the widest activation of a 4096-token micro-batch (152.00 MiB) exceeds the device's 152.00 MiB " +
      "storage binding; use fewer KV slots, a shorter context, a smaller prefill chunk or fewer tokens per micro-batch.",
  );
  const base = { ...setup, train: undefined };
  const want = { microBatchTokens: 4096, longest: 64, stepTokens: 2 * 64 };
  // Two sequences of 64 tokens pad to one micro-batch of 128 tokens, at most.
  const short = planTraining(qwen05, base, limits, undefined, { ...want, sequences: 2 });
  expect(short.microBatchTokens).toBe(128);
  const run = planTraining(qwen05, base, limits, undefined, want);
  expect(run.microBatchTokens).toBe(4096);
  expect(short.plan.training).toBeLessThan(run.plan.training / 10);
  // Ragged sequences pad to the longest: 3 sequences, the longest of 100 tokens, hold 300 rows.
  const ragged = planTraining(qwen05, base, limits, undefined, {
    ...want,
    longest: 100,
    stepTokens: 150,
    sequences: 3,
  });
  expect(ragged.microBatchTokens).toBe(300);
});
