// Every weight a config implies, by its Hugging Face name and shape, plus the parameter count and a one-line
// summary. Shapes follow torch's nn.Linear layout: (out_features, in_features).

import type { ModelConfig } from "./config.ts";
import { EMBED, FINAL_NORM, LM_HEAD, NORMS, PROJECTIONS, layerTensor } from "./names.ts";

/** HF weight name → shape, in checkpoint order (embedding, layers 0..L-1, final norm, lm_head). */
export function tensorShapes(c: ModelConfig): Map<string, number[]> {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D, vocabSize: V } = c;
  const P = PROJECTIONS;
  const m = new Map<string, number[]>();
  m.set(EMBED, [V, C]);
  for (let i = 0; i < c.numLayers; i++) {
    const t = (module: string, kind: "weight" | "bias" = "weight") => layerTensor(i, module, kind);
    m.set(t(NORMS.input), [C]);
    m.set(t(P.q), [H * D, C]);
    m.set(t(P.k), [KV * D, C]);
    m.set(t(P.v), [KV * D, C]);
    if (c.qkvBias) {
      m.set(t(P.q, "bias"), [H * D]);
      m.set(t(P.k, "bias"), [KV * D]);
      m.set(t(P.v, "bias"), [KV * D]);
    }
    if (c.qkNorm) {
      m.set(t(NORMS.q), [D]);
      m.set(t(NORMS.k), [D]);
    }
    m.set(t(P.o), [C, H * D]);
    if (c.oBias) m.set(t(P.o, "bias"), [C]);
    m.set(t(NORMS.postAttention), [C]);
    if (c.sandwichNorms) {
      m.set(t(NORMS.preFeedforward), [C]);
      m.set(t(NORMS.postFeedforward), [C]);
    }
    m.set(t(P.gate), [F, C]);
    m.set(t(P.up), [F, C]);
    m.set(t(P.down), [C, F]);
  }
  m.set(FINAL_NORM, [C]);
  if (!c.tieWordEmbeddings) m.set(LM_HEAD, [V, C]);
  return m;
}

/** The alignment of a storage binding's offset (WebGPU's minStorageBufferOffsetAlignment default). */
export const SEGMENT_ALIGN = 256;

/**
 * Tensors that share one GPU buffer, so that one dispatch reads them side by side (decode's q|k|v projection, and
 * gate|up): per layer q, k, v; their biases; gate and up.
 */
export function weightGroups(c: ModelConfig): string[][] {
  const groups: string[][] = [];
  for (let i = 0; i < c.numLayers; i++) {
    const qkv = [PROJECTIONS.q, PROJECTIONS.k, PROJECTIONS.v];
    groups.push(qkv.map((m) => layerTensor(i, m)));
    if (c.qkvBias) groups.push(qkv.map((m) => layerTensor(i, m, "bias")));
    groups.push([PROJECTIONS.gate, PROJECTIONS.up].map((m) => layerTensor(i, m)));
  }
  return groups;
}

/**
 * Element offsets of tensors of `sizes` elements in one buffer, each starting on a 256-byte boundary (so each can
 * still be bound alone, e.g. by full fine-tuning's optimizer), and the elements the buffer spans.
 */
export function groupLayout(sizes: number[], bytesPerElement: number): { offsets: number[]; elements: number } {
  const align = SEGMENT_ALIGN / bytesPerElement;
  const offsets: number[] = [];
  let end = 0;
  for (const n of sizes) {
    const off = Math.ceil(end / align) * align;
    offsets.push(off);
    end = off + n;
  }
  return { offsets, elements: end };
}

/**
 * Tensors a checkpoint may hold that the model does not use: a copy of the tied lm_head, and the RoPE
 * inverse-frequency buffers some older exports saved. Loaders skip these instead of calling them extra.
 */
export function isIgnorableTensor(c: ModelConfig, name: string): boolean {
  return (c.tieWordEmbeddings && name === LM_HEAD) || name.endsWith(".rotary_emb.inv_freq");
}

export function parameterCount(c: ModelConfig): number {
  let n = 0;
  for (const shape of tensorShapes(c).values()) n += shape.reduce((a, b) => a * b, 1);
  return n;
}

const BYTES_PER: Record<string, number> = { float32: 4, float16: 2, bfloat16: 2 };

/** One line for logs and the UI, e.g. "qwen3 (Qwen3ForCausalLM): 28 layers, C=1024 ... 596.0M parameters". */
export function describeConfig(c: ModelConfig): string {
  const n = parameterCount(c);
  const count = n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : `${n}`;
  const dtype = c.torchDtype ?? "float32";
  const gb = (n * BYTES_PER[dtype]) / 1e9;
  const rope = c.ropeScaling.type !== "none" ? `, ${c.ropeScaling.type} rope scaling x${c.ropeScaling.factor}` : "";
  const local = c.localRope ? `, local rope theta ${c.localRope.theta}` : "";
  const sliding = c.layerTypes.filter((t) => t === "sliding").length;
  const extras = [
    c.qkvBias && "qkv bias",
    c.oBias && "o bias",
    c.qkNorm && "q/k norm",
    c.hiddenAct === "gelu_tanh" && "GeGLU",
    c.sandwichNorms && "sandwich norms",
    sliding && `sliding window ${c.slidingWindow} on ${sliding} of ${c.numLayers} layers`,
    c.tieWordEmbeddings && "tied embeddings",
  ]
    .filter(Boolean)
    .join(", ");
  return (
    `${c.family} (${c.architecture}): ${c.numLayers} layers, C=${c.hiddenSize}, F=${c.intermediateSize}, ` +
    `H=${c.numHeads}, KV=${c.numKvHeads}, D=${c.headDim}, V=${c.vocabSize}${extras ? ", " + extras : ""}, ` +
    `rope theta ${c.ropeTheta}${rope}${local}; ${count} parameters (${gb.toFixed(2)} GB in ${dtype})`
  );
}
