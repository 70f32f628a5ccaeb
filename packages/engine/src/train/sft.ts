// Full-parameter supervised fine-tuning (the embedded model's pretraining): next-token cross-entropy on
// the masked (assistant) tokens, backward into every base weight (f32), global grad-norm clip + AdamW.
import type { Gpu } from "@webart/gpu";
import {
  adamwPartsBytes,
  adamwStatsBytes,
  adamwUpdate,
  embeddingBackward,
  gradNorm,
  matmul,
  tableViews,
  trainingSlotPos,
} from "@webart/shaders";
import {
  EMBED,
  FINAL_NORM,
  LM_HEAD,
  NORMS,
  PROJECTIONS,
  layerModule,
  layerTensor,
  tensorShapes,
  type ModelConfig,
} from "../config/index.ts";
import { LORA_TARGETS, type LoraTarget } from "../plan.ts";
import type { Model, WeightGrads } from "../model/model.ts";
import { bindingOf } from "../model/weights.ts";
import { microBatches, type OptimizerConfig } from "./grpo.ts";
import { headBackward, headLogprobs } from "./head.ts";

export interface SftSequence {
  ids: ArrayLike<number>;
  /** Each position's weight in the loss: 1 for learned tokens (assistant tokens), 0 for context, or any
   * weight >= 0 in between (e.g. a smaller weight on the prompt's tokens, to learn to read them too). */
  mask: ArrayLike<number>;
}

type Win = { buffer: GPUBuffer; offset: number; size: number };

/**
 * Gradients of every base weight, for full fine-tuning (f32 weights): one flat f32 buffer, the embedding
 * first (so it can be viewed as a table), each tensor at a 64-element (256-byte) aligned offset.
 */
export interface FullGrads {
  buffer: GPUBuffer;
  /** HF tensor name → element offset. */
  offsets: Map<string, number>;
  size: number;
}

export function fullGradLayout(c: ModelConfig): { offsets: Map<string, number>; size: number } {
  const offsets = new Map<string, number>();
  let off = 0;
  for (const [name, shape] of tensorShapes(c)) {
    offsets.set(name, off);
    off += Math.ceil(shape.reduce((a, b) => a * b, 1) / 64) * 64;
  }
  return { offsets, size: off };
}

/**
 * The hook through which the head and layer backward of one micro-batch add every base weight's gradient into
 * `full`. The micro-batch's token ids are on the CPU: the embedding's backward groups its rows by id.
 */
/** The layer weights' field holding each projection's bias, where it can have one. */
const BIAS: Partial<Record<LoraTarget, "qBias" | "kBias" | "vBias" | "oBias">> = {
  q: "qBias",
  k: "kBias",
  v: "vBias",
  o: "oBias",
};

function fullWeightGrads(model: Model, full: FullGrads, ids: Uint32Array): WeightGrads {
  const gpu = model.gpu;
  const c = model.config;
  const C = c.hiddenSize;
  let ones: GPUBuffer | undefined; // (N) of 1: a bias's gradient sums dy over rows
  return {
    head(rec, dlogits, h, M, v0, v1) {
      // The embedding's rows when the head is tied to it.
      const name = c.tieWordEmbeddings ? EMBED : LM_HEAD;
      matmul(
        gpu,
        rec,
        { a: dlogits, b: h, c: full.buffer },
        { M: v1 - v0, N: C, K: M },
        {
          mode: "tn",
          lda: v1 - v0,
          offsetC: full.offsets.get(name)! + v0 * C,
          accumulate: true,
          tuning: model.tuning.matmul,
        },
      );
    },
    linear(rec, l, t, x, dy, N, cols) {
      const W = model.weights.layers[l][t];
      const name = layerModule(l, PROJECTIONS[t]);
      const at = cols && { lda: cols.lddy, offsetA: cols.offsetDy }; // dy: a column range of wider rows
      matmul(
        gpu,
        rec,
        { a: dy, b: x, c: full.buffer },
        { M: W.rows, N: W.cols, K: N },
        {
          mode: "tn",
          ...at,
          offsetC: full.offsets.get(`${name}.weight`)!,
          accumulate: true,
          tuning: model.tuning.matmul,
        },
      );
      const bias = full.offsets.get(`${name}.bias`);
      if (bias !== undefined) {
        ones ??= gpu.upload(new Float32Array(N).fill(1), "activations", "ones");
        matmul(
          gpu,
          rec,
          { a: ones, b: dy, c: full.buffer },
          { M: 1, N: W.rows, K: N },
          {
            mode: "nn",
            ...(cols && { ldb: cols.lddy, offsetB: cols.offsetDy }),
            offsetC: bias,
            accumulate: true,
            tuning: model.tuning.matmul,
          },
        );
      }
    },
    norm: (name, n) => ({ buffer: full.buffer, offset: full.offsets.get(name)! * 4, size: n * 4 }),
    embedding(rec, dx) {
      // dx is the gradient at the embedding's output: scatter-add it into the embedding rows.
      embeddingBackward(gpu, rec, { dout: dx, dW: tableViews(gpu, full.buffer, c.vocabSize, C, "f32") }, { ids });
      gpu.release(ones);
    },
  };
}

/** Gradient and AdamW state for every base weight of a model loaded with f32 weights. */
export class FullTrainer {
  readonly grads: FullGrads;
  readonly m: GPUBuffer;
  readonly v: GPUBuffer;
  /** Each tensor: its weight binding and its element offset / count in the flat buffers. */
  readonly tensors: { name: string; weight: GPUBuffer | Win; offset: number; n: number }[] = [];
  step = 0;

  constructor(readonly model: Model) {
    const gpu = model.gpu;
    const c = model.config;
    const w = model.weights;
    const { offsets, size } = fullGradLayout(c);
    const z = new Float32Array(size);
    this.grads = { buffer: gpu.upload(z, "optimizer", "full grads"), offsets, size };
    this.m = gpu.upload(z, "optimizer", "full adam m");
    this.v = gpu.upload(z, "optimizer", "full adam v");
    // Gemma's norm weights live on the GPU as 1 + w and its embedding is scaled: full fine-tuning would have to
    // undo both in the gradients and in what it saves, and nothing trains Gemma that way here (LoRA does).
    if (c.normUnitOffset || c.embedScale !== 1)
      throw new Error(
        `full fine-tuning supports llama, mistral, qwen2 and qwen3 models, not ${c.family}; train ${c.family} with LoRA`,
      );
    const byName = new Map<string, GPUBuffer | Win>();
    if (w.embed.dtype !== "f32" || w.embed.shards.length !== 1)
      throw new Error("full fine-tuning needs f32 weights (load with weightsF32) and a single embedding shard");
    const e = w.embed.shards[0].binding;
    byName.set(EMBED, "buffer" in e ? (e as Win) : e);
    w.layers.forEach((L, i) => {
      for (const t of LORA_TARGETS) {
        const name = layerTensor(i, PROJECTIONS[t]);
        if (L[t].dtype !== "f32") throw new Error(`full fine-tuning needs f32 weights; ${name} is ${L[t].dtype}`);
        byName.set(name, bindingOf(L[t]));
        const bk = BIAS[t];
        const b = bk && L[bk];
        if (b) byName.set(layerTensor(i, PROJECTIONS[t], "bias"), bindingOf(b));
      }
      byName.set(layerTensor(i, NORMS.input), L.inNorm);
      byName.set(layerTensor(i, NORMS.postAttention), L.mlpNorm);
      if (L.qNorm) byName.set(layerTensor(i, NORMS.q), L.qNorm);
      if (L.kNorm) byName.set(layerTensor(i, NORMS.k), L.kNorm);
    });
    byName.set(FINAL_NORM, w.finalNorm);
    if (!c.tieWordEmbeddings) byName.set(LM_HEAD, w.head[0].buffer);
    for (const [name, shape] of tensorShapes(c)) {
      const weight = byName.get(name);
      if (!weight) throw new Error(`full fine-tuning: no GPU buffer for ${name}`);
      this.tensors.push({ name, weight, offset: offsets.get(name)!, n: shape.reduce((a, b) => a * b, 1) });
    }
  }

  /** Zeroes AdamW's moments and its step count (bias correction restarts), as for a new run on the same weights. */
  async resetOptimizer(): Promise<void> {
    const rec = this.model.gpu.recorder();
    rec.clear(this.m);
    rec.clear(this.v);
    await rec.submit();
    this.step = 0;
  }

  /** Every trained tensor's current values, in `tensors` order, read back in one submit. */
  async readWeights(): Promise<Float32Array[]> {
    const rec = this.model.gpu.recorder();
    const reads = this.tensors.map((t) =>
      "buffer" in t.weight ? rec.read(t.weight.buffer, t.n * 4, t.weight.offset) : rec.read(t.weight, t.n * 4),
    );
    await rec.submit();
    return (await Promise.all(reads)).map((b) => new Float32Array(b));
  }

  /** One optimizer step on sequences; returns the loss (mean over tokens, weighted by the masks), the sum of
   * the weights (`tokens`) and the grad norm. */
  async step_(
    seqs: SftSequence[],
    o: OptimizerConfig & { microBatchTokens: number; vocabChunk?: number; recompute?: boolean },
  ): Promise<{ loss: number; tokens: number; gradNorm: number }> {
    const model = this.model;
    const gpu: Gpu = model.gpu;
    const V = model.config.vocabSize;
    const chunk = Math.min(o.vocabChunk ?? 8192, V);
    const total = seqs.reduce(
      (s, q) =>
        s +
        Array.from(q.mask)
          .slice(1)
          .reduce((a, b) => a + b, 0),
      0,
    );
    if (!total) throw new Error("sft: no masked tokens to learn");
    const lossBuf = gpu.buffer(seqs.reduce((s, q) => s + q.ids.length, 0) * 4, "optimizer", "sft lp");
    const weights: number[] = [];
    {
      const rec = gpu.recorder();
      rec.clear(this.grads.buffer);
      await rec.submit();
    }
    let row = 0;
    for (const idx of microBatches(
      seqs.map((s) => s.ids.length),
      o.microBatchTokens,
    )) {
      const B = idx.length;
      const T = Math.max(...idx.map((i) => seqs[i].ids.length));
      const N = B * T;
      const ids = new Uint32Array(N);
      const targets = new Uint32Array(N);
      const dlogp = new Float32Array(N);
      idx.forEach((si, b) => {
        const s = seqs[si];
        for (let t = 0; t < s.ids.length; t++) {
          ids[b * T + t] = s.ids[t];
          if (t + 1 < s.ids.length) {
            targets[b * T + t] = s.ids[t + 1];
            // loss = -(1/total) Σ mask·logp, so dloss/dlogp = -mask/total.
            dlogp[b * T + t] = -s.mask[t + 1] / total;
          }
        }
      });
      const rec = gpu.recorder();
      const bIds = gpu.upload(ids);
      const bT = gpu.upload(targets);
      const bD = gpu.upload(dlogp);
      const slotPos = gpu.upload(trainingSlotPos(B, T));
      const { acts } = model.forward(
        rec,
        bIds,
        N,
        { kind: "train", B, T, slotPos, normGrads: true },
        true,
        o.recompute,
      );
      const lp = gpu.buffer(N * 4);
      const ent = gpu.buffer(N * 4);
      const lse = gpu.buffer(N * 4);
      headLogprobs(model, rec, acts!.hN, bT, N, lp, ent, lse, chunk);
      idx.forEach((si, b) => {
        const L = seqs[si].ids.length;
        rec.copy(lp, b * T * 4, lossBuf, row * 4, L * 4);
        for (let t = 0; t < L; t++) weights.push(t + 1 < L ? seqs[si].mask[t + 1] : 0);
        row += L;
      });
      const weightGrads = fullWeightGrads(model, this.grads, ids);
      const dhN = headBackward(model, rec, acts!.hN, bT, lse, ent, bD, N, chunk, weightGrads);
      gpu.release(lp, ent, lse);
      model.backward(rec, acts!, dhN, { B, T }, weightGrads);
      gpu.release(bIds, bT, bD, slotPos, dhN);
      await rec.submit();
    }
    this.step += 1;
    const parts = gpu.buffer(adamwPartsBytes, "optimizer");
    const stats = gpu.buffer(adamwStatsBytes, "optimizer");
    const rec = gpu.recorder();
    gradNorm(gpu, rec, { grads: this.grads.buffer, parts, stats }, { n: this.grads.size, maxNorm: o.maxGradNorm });
    const cfg = {
      lr: o.lr,
      beta1: o.beta1,
      beta2: o.beta2,
      eps: o.eps,
      weightDecay: o.weightDecay,
      maxNorm: o.maxGradNorm,
    };
    for (const t of this.tensors) {
      const w = (b: GPUBuffer): Win => ({ buffer: b, offset: t.offset * 4, size: t.n * 4 });
      // Norm weights and biases are not decayed (as is usual).
      const decay = t.name.endsWith("norm.weight") || t.name.endsWith(".bias") ? 0 : cfg.weightDecay;
      adamwUpdate(
        gpu,
        rec,
        { weights: t.weight, grads: w(this.grads.buffer), m: w(this.m), v: w(this.v), stats },
        { n: t.n, step: this.step },
        { ...cfg, weightDecay: decay },
      );
    }
    const sRead = rec.read(stats, adamwStatsBytes);
    const lRead = rec.read(lossBuf, row * 4);
    gpu.release(parts, stats, lossBuf);
    model.releaseMerged(); // the base weights move: an adapter merged into them is made again
    await rec.submit();
    const s = new Float32Array(await sRead);
    const lp = new Float32Array(await lRead);
    let loss = 0;
    // Row r of a sequence holds the logprob of the token at r + 1.
    for (let i = 0; i < row; i++) loss -= weights[i] * lp[i];
    return { loss: loss / total, tokens: total, gradNorm: s[0] };
  }
}
