// The memory planner: for any HF config and setup, the bytes for weights, LoRA, optimizer, KV cache
// and activations, stated before anything is allocated; a plan that cannot fit is refused with the reason.
import { tensorShapes, type ModelConfig } from "./config/index.ts";

export const LORA_TARGETS = ["q", "k", "v", "o", "gate", "up", "down"] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export interface PlanSetup {
  /** Bytes per frozen base weight element on the GPU: 2 (bf16/f16 kept packed) or 4 (f32). */
  weightBytes: 2 | 4;
  /** KV cache: sequences held at once and their context length. */
  kvSlots: number;
  kvContext: number;
  /** Tokens prefilled per engine step (chunked prefill). */
  prefillChunk: number;
  /** Vocabulary columns of logits computed at once (LM head and logprobs run in chunks). */
  vocabChunk: number;
  lora?: { rank: number; targets: readonly LoraTarget[] };
  /** Training: tokens per micro-batch, and whether activations are recomputed in backward. */
  train?: { microBatchTokens: number; recompute: boolean };
}

export interface MemoryPlan {
  weights: number;
  lora: number;
  /** LoRA gradients and AdamW moments. */
  optimizer: number;
  kvCache: number;
  /** Inference working buffers (prefill chunk, logits chunk, sampling). */
  inference: number;
  /** Training activations kept for backward plus the working set of one layer and the logits chunk. */
  training: number;
  total: number;
  /** The largest single tensor after splitting, which must fit one storage binding. */
  largestBinding: number;
  lines: string[];
}

export interface AdapterLimits {
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
}

const F32 = 4;

function loraShapes(c: ModelConfig): Record<LoraTarget, [number, number]> {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  // [in, out] of each adapted projection.
  return { q: [C, H * D], k: [C, KV * D], v: [C, KV * D], o: [H * D, C], gate: [C, F], up: [C, F], down: [F, C] };
}

export function loraParameterCount(c: ModelConfig, rank: number, targets: readonly LoraTarget[]): number {
  const s = loraShapes(c);
  return c.numLayers * targets.reduce((n, t) => n + rank * (s[t][0] + s[t][1]), 0);
}

/** f32 values kept per token per layer for backward (without recompute). */
function savedPerTokenLayer(c: ModelConfig, rank: number, nTargets: number): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  // residual in, normed x, rstd x2, q/k/v (post-RoPE), attention out + lse, residual mid, normed mid,
  // gate, up, silu(gate)*up, LoRA intermediates, and q/k norm stats for Qwen3.
  return 4 * C + 2 + 2 * H * D + 2 * KV * D + H + 3 * F + rank * nTargets + (c.qkNorm ? H + KV : 0);
}

export function planMemory(c: ModelConfig, s: PlanSetup): MemoryPlan {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D, numLayers: L } = c;
  let weights = 0;
  let largest = 0;
  for (const [name, shape] of tensorShapes(c)) {
    const n = shape.reduce((a, b) => a * b, 1);
    // Norm weights and biases are converted to f32; matrices keep their 16-bit form.
    const b = shape.length === 1 ? n * F32 : n * s.weightBytes;
    weights += b;
    // Embedding / LM head rows are split across bindings; other matrices are one binding each.
    if (!name.includes("embed_tokens") && !name.startsWith("lm_head")) largest = Math.max(largest, b);
  }
  const rank = s.lora?.rank ?? 0;
  const targets = s.lora?.targets ?? [];
  const loraParams = s.lora ? loraParameterCount(c, rank, targets) : 0;
  const lora = loraParams * F32;
  const optimizer = s.train && s.lora ? loraParams * F32 * 3 : 0; // grads, m, v
  const kvCache = 2 * L * s.kvSlots * s.kvContext * KV * D * F32;
  largest = Math.max(largest, kvCache / (2 * L));
  const prefillAct = s.prefillChunk * (3 * C + 2 * H * D + 2 * KV * D + 3 * F + H) * F32;
  const logitsChunk = s.prefillChunk * s.vocabChunk * F32;
  const inference = prefillAct + logitsChunk + s.kvSlots * s.vocabChunk * F32;
  let training = 0;
  if (s.train) {
    const T = s.train.microBatchTokens;
    const perLayer = savedPerTokenLayer(c, rank, targets.length) * F32 * T;
    const saved = s.train.recompute ? L * C * F32 * T + perLayer : L * perLayer;
    // Gradients in flight for one layer (dx, dq/dk/dv, dgate/dup), the final hidden states and their
    // gradient, one logits chunk and its gradient, and per-token loss buffers.
    const working = T * (2 * C + 2 * H * D + 2 * KV * D + 2 * F) * F32;
    const head = T * (2 * C) * F32 + 2 * T * s.vocabChunk * F32 + 16 * T * F32;
    training = saved + working + head;
    largest = Math.max(largest, T * s.vocabChunk * F32, T * F * F32);
  }
  const total = weights + lora + optimizer + kvCache + inference + training;
  const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  const lines = [
    `weights     ${mb(weights)} (${s.weightBytes === 2 ? "16-bit" : "f32"} matrices)`,
    `lora        ${mb(lora)}${s.lora ? ` (rank ${rank}, ${targets.join(",")}, ${loraParams} params)` : ""}`,
    `optimizer   ${mb(optimizer)} (gradients + AdamW moments)`,
    `kv cache    ${mb(kvCache)} (${s.kvSlots} sequences x ${s.kvContext} tokens)`,
    `inference   ${mb(inference)} (prefill chunk ${s.prefillChunk}, vocab chunk ${s.vocabChunk})`,
    `training    ${mb(training)}${s.train ? ` (${s.train.microBatchTokens} tokens per micro-batch, recompute ${s.train.recompute ? "on" : "off"})` : ""}`,
    `total       ${mb(total)}`,
  ];
  return { weights, lora, optimizer, kvCache, inference, training, total, largestBinding: largest, lines };
}

export class PlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PlanError";
  }
}

/** Throws a PlanError naming what does not fit: a binding over the adapter's limit, or the total over the budget. */
export function checkPlan(plan: MemoryPlan, limits: AdapterLimits, budgetBytes?: number): void {
  const bind = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  if (plan.largestBinding > bind) {
    throw new PlanError(
      `memory plan: a ${(plan.largestBinding / 2 ** 20).toFixed(0)} MiB tensor exceeds the adapter's ` +
        `${(bind / 2 ** 20).toFixed(0)} MiB storage binding; use fewer KV slots, a shorter context or a smaller micro-batch.`,
    );
  }
  if (budgetBytes !== undefined && plan.total > budgetBytes) {
    throw new PlanError(
      `memory plan: ${(plan.total / 2 ** 30).toFixed(2)} GiB needed but the budget is ${(budgetBytes / 2 ** 30).toFixed(2)} GiB:\n  ` +
        plan.lines.join("\n  ") +
        "\nReduce KV slots or context, the micro-batch, or turn on recompute.",
    );
  }
}
