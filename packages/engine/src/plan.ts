// The memory planner: for any HF config and setup, the bytes that inference and a training step hold on the
// GPU, stated before anything is allocated. It follows the buffers the model code takes from the pool (their
// sizes rounded as the pool rounds them) through each phase and keeps the largest; `planTraining` chooses
// the micro-batch, activation recompute and vocabulary chunk that fit a budget, or refuses with the reason.
import { bucketSize } from "@webart/gpu";
import {
  adamwPartsBytes,
  adamwStatsBytes,
  GRPO_META_WORDS,
  grpoTotalsBytes,
  q4Bytes,
  q4DequantBytes,
} from "@webart/shaders";
import {
  EMBED,
  LM_HEAD,
  SEGMENT_ALIGN,
  groupLayout,
  tensorShapes,
  weightGroups,
  PROJECTIONS,
  layerTensor,
  type ModelConfig,
} from "./config/index.ts";
import { DECODE_ROWS } from "./model/decode-rows.ts";
import { Q4_HEAD_ROWS, q4Rows, q4StagingBytes } from "./model/weights.ts";

export const LORA_TARGETS = ["q", "k", "v", "o", "gate", "up", "down"] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export interface PlanSetup {
  /** Bytes per frozen base weight element on the GPU: 2 (bf16/f16 kept packed) or 4 (f32). */
  weightBytes: 2 | 4;
  /** The model's matrices as q4 (EngineOptions.quantize): nibbles and scales, and the f16 copy of the product being
   *  computed (model.ts `dense`, headShard) in each step's working set; an embedding or LM head whose rows are not
   *  whole groups of 32 keeps weightBytes. */
  quantize?: "q4";
  /** KV cache: sequences held at once and their context length. */
  kvSlots: number;
  kvContext: number;
  /** Tokens prefilled per engine step (chunked prefill). */
  prefillChunk: number;
  /** Vocabulary columns of logits computed at once in training (LM head and logprobs run in chunks). */
  vocabChunk: number;
  lora?: { rank: number; targets: readonly LoraTarget[] };
  /**
   * Training: tokens per micro-batch (B x T, padded), whether activations are recomputed in backward, and whether
   * rows carry allowed sets (tokens from a constrained sampler, TrainSequence.allowed): planned at their worst, a
   * set of its own for every row. `stepTokens`: the whole step's tokens (every sequence's; default one
   * micro-batch), each keeping its entropy, and with `logprobs` its logprob (an SFT step reports its loss from them),
   * until the step's metrics are read.
   */
  train?: {
    microBatchTokens: number;
    recompute: boolean;
    allowedSets?: boolean;
    stepTokens?: number;
    logprobs?: boolean;
  };
  /** The base weights are already on the GPU (another run of the same base model): not counted again. */
  sharedWeights?: boolean;
  /** Tokens a workgroup sums in LoRA's gradient products where the device's LoRA layout splits them over
   * workgroups (`loraGradChunk` of @webart/shaders: 128 on GPUs); each split keeps its partial sums. */
  loraGradChunk?: number;
  /** Rows up to which an inference step runs its layers as model.ts's decodeLayer and its projections as matvecs
   *  (start-up tuning's KernelTuning.decodeRows; default DECODE_ROWS). */
  decodeRows?: number;
  /** decodeLayer runs RoPE in the q|k|v matvec (model.ts fuseRope: on the device the engine loads on when
   *  matvecRopeFits; models without per-head q/k norms): no packed q|k|v buffer. Default false. */
  ropeInMatvec?: boolean;
  /** With an adapter, inference runs on an f32 copy of the layers' weights with it merged in (model.ts mergeLora;
   *  a 16-bit model's decode steps): counted with the adapter. Default false. */
  mergeLora?: boolean;
  /** Decode steps the scheduler runs back to back (EngineOptions.decodeAhead; default 8): each one's readbacks are
   *  held until the run ends. */
  decodeAhead?: number;
  /** Workgroups a decode step's split-KV attention fills at most (attention's decodeTarget: 128 on GPUs, 4 on CPU
   *  devices; 0 where decode attention never splits). Default 128. */
  splitKvTarget?: number;
  /** The sampler's split of a row over workgroups (start-up tuning's SampleTuning.split; default 1). */
  sampleSplit?: number;
  /** Start-up tuning's buffers (tuneScratchBytes of @webart/shaders; 0 or none: no tuning): held at load, after the
   *  weights and before anything else, and given back before the first step. */
  tuning?: number;
}

export interface MemoryPlan {
  weights: number;
  lora: number;
  /** LoRA gradients and AdamW moments, held from the first step on. */
  optimizer: number;
  kvCache: number;
  /** The largest working set of inference: the larger of inferenceStep and decodeRun. */
  inference: number;
  /** A step of the prefill chunk and a decode row in every other slot (its layers' temporaries, logits of the
   *  sampled rows, sampling). */
  inferenceStep: number;
  /** A run of decode steps (ModelRunner.decode): the captured step's buffers (Tape), one step's beside them, every
   *  step's readbacks. */
  decodeRun: number;
  /** The largest working set of a training step: a micro-batch's kept activations, one layer's gradients and a
   *  logits chunk, with the step's per-token rows and totals; or the optimizer's partial sums. */
  training: number;
  /** The training part that grows with depth (per layer, times layers), for extrapolating from fewer layers. */
  trainingPerLayer: number;
  /** Start-up tuning's buffers, beside the weights alone (PlanSetup.tuning). */
  tuning: number;
  /** weights + lora + optimizer + kvCache + the larger of inference and training (they never run at once); or, where
   *  more, the weights and start-up tuning. */
  total: number;
  /** The device's live bytes at the peak of an inference step, and of a training step. */
  peakInference: number;
  peakTraining: number;
  /** The largest single tensor after splitting, which must fit one storage binding, and what it is. */
  largestBinding: number;
  largestWhat: string;
  lines: string[];
}

export interface AdapterLimits {
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
}

const F32 = 4;
const MiB = 2 ** 20;
/** Exact-size tensors (weights, KV, LoRA, optimizer state) are rounded to 16 bytes, as the pool does. */
const exact = (bytes: number) => Math.max(16, Math.ceil(bytes / 16) * 16);
/** A scratch buffer of n f32 values, rounded to the pool's bucket. */
const f = (n: number) => bucketSize(n * F32);
/** Per recorder: one 64 KiB uniform chunk (more for long recordings are released as they are flushed). */
const UNIFORMS = 64 * 1024;

function loraShapes(c: ModelConfig): Record<LoraTarget, [number, number]> {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  // [in, out] of each adapted projection.
  return { q: [C, H * D], k: [C, KV * D], v: [C, KV * D], o: [H * D, C], gate: [C, F], up: [C, F], down: [F, C] };
}

export function loraParameterCount(c: ModelConfig, rank: number, targets: readonly LoraTarget[]): number {
  const s = loraShapes(c);
  return c.numLayers * targets.reduce((n, t) => n + rank * (s[t][0] + s[t][1]), 0);
}

/** Bytes of q4 weights of n elements (nibbles and scales, each a buffer's worth). */
const q4 = (n: number) => exact(q4Bytes(n).nibbles) + exact(q4Bytes(n).scales);

/** Bytes of the frozen weights as uploaded: 16-bit or f32 matrices (q4 projections with `quantized`), f32 norms and
 *  biases, RoPE frequencies. */
function weightBytes(c: ModelConfig, wb: 2 | 4, quantized = false): { bytes: number; largest: number } {
  let bytes = (c.localRope ? 2 : 1) * exact((c.headDim / 2) * F32); // RoPE tables
  let largest = 0;
  const shapes = tensorShapes(c);
  const size = (name: string) => shapes.get(name)!.reduce((a, b) => a * b, 1);
  const grouped = new Set<string>();
  // A layer's q, k, v (and their biases), and its gate and up, share a buffer (model/weights.ts; one buffer each
  // where the group would not fit a binding, so a binding still holds the largest single tensor).
  for (const names of weightGroups(c)) {
    const bias = names[0].endsWith(".bias");
    const e = bias ? F32 : quantized ? 0.5 : wb;
    const { elements } = groupLayout(names.map(size), e);
    bytes += e === 0.5 ? q4(elements) : exact(e === 2 ? Math.ceil(elements / 2) * 4 : elements * e);
    for (const n of names) {
      largest = Math.max(largest, exact(Math.ceil(size(n) * e)));
      grouped.add(n);
    }
  }
  for (const [name, shape] of shapes) {
    if (grouped.has(name)) continue;
    const n = shape.reduce((a, b) => a * b, 1);
    // q4: the projections, and the embedding and LM head where their rows are whole groups (one binding each).
    const table = name === EMBED || name === LM_HEAD;
    const q = quantized && shape.length === 2 && (!table || q4Rows(shape[1]));
    const b = shape.length === 1 ? exact(n * F32) : q ? q4(n) : exact(n * wb);
    if (q && table) largest = Math.max(largest, exact(n / 2));
    bytes += b;
    // Embedding / LM head rows are split across bindings; other matrices are one binding each.
    if (name !== EMBED && name !== LM_HEAD) largest = Math.max(largest, b);
  }
  return { bytes, largest };
}

/** The f32 copy of the layer weights that inference runs with the adapter merged in (model.ts mergeLora): each buffer
 *  that holds a projection's weight, the q|k|v and gate|up groups whole; for 16-bit weights, f32 elements at their
 *  16-bit layout's offsets. `largest`: its largest buffer, bound whole by the matvecs. */
function mergedWeightBytes(c: ModelConfig, wb: 2 | 4): { bytes: number; largest: number } {
  const shapes = tensorShapes(c);
  const size = (name: string) => shapes.get(name)!.reduce((a, b) => a * b, 1);
  const grouped = new Set<string>();
  let bytes = 0;
  let largest = 0;
  const add = (b: number) => {
    bytes += b;
    largest = Math.max(largest, b);
  };
  for (const names of weightGroups(c)) {
    if (names[0].endsWith(".bias")) continue;
    add(exact(groupLayout(names.map(size), wb).elements * F32));
    for (const n of names) grouped.add(n);
  }
  for (let l = 0; l < c.numLayers; l++) {
    for (const module of Object.values(PROJECTIONS)) {
      const name = layerTensor(l, module);
      if (!grouped.has(name)) add(exact(size(name) * F32));
    }
  }
  return { bytes, largest };
}

/** g and u (or their gradients): one (N, 2F) buffer where gate and up run as one matmul (their weights back to back:
 *  each fills whole 256-byte blocks, model.ts `gateUp`), else two of (N, F). */
function gateUp(c: ModelConfig, N: number, weightBytes: number): number {
  return gateUpFused(c, weightBytes) ? f(N * 2 * c.intermediateSize) : 2 * f(N * c.intermediateSize);
}

/** Whether gate and up run as one product (model.ts `gateUp`): their weights back to back. */
function gateUpFused(c: ModelConfig, weightBytes: number): boolean {
  return (c.intermediateSize * c.hiddenSize * weightBytes) % SEGMENT_ALIGN === 0;
}

/** Whether q, k and v run as one product (model.ts `qkvProduct`, per-head q/k norms included: LoRA training and
 *  inference): the weights (and biases) back to back, as the loader places them when each fills whole 256-byte
 *  blocks. */
function qkvFused(c: ModelConfig, weightBytes: number): boolean {
  const { hiddenSize: C, numHeads: H, numKvHeads: KV, headDim: D } = c;
  const whole = (bytes: number) => bytes % SEGMENT_ALIGN === 0;
  const biases = !c.qkvBias || (whole(H * D * 4) && whole(KV * D * 4));
  return whole(H * D * C * weightBytes) && whole(KV * D * C * weightBytes) && biases;
}

/** q4 weights: the f16 copy of the largest product read at once (model.ts `dense`: q|k|v or gate|up where they run as
 *  one product, else one projection), live beside a step's temporaries. */
function q4Scratch(c: ModelConfig): Q4Scratch {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D, vocabSize: V } = c;
  const qkv = qkvFused(c, 0.5) ? (H + 2 * KV) * D * C : H * D * C;
  const gu = gateUpFused(c, 0.5) ? 2 * F * C : F * C;
  const copy = (n: number) => (n ? bucketSize(q4DequantBytes(n)) : 0);
  // A q4 LM head's products read Q4_HEAD_ROWS of its rows at a time (model.ts headShard).
  return {
    layer: copy(Math.max(qkv, gu, C * H * D, C * F)),
    head: q4Rows(C) ? copy(Math.min(V, Q4_HEAD_ROWS) * C) : 0,
  };
}

/** The f16 copies of q4 weights a step holds at once: in a layer's phase, and in the LM head's. */
interface Q4Scratch {
  layer: number;
  head: number;
}
const NO_Q4: Q4Scratch = { layer: 0, head: 0 };

/** What one layer's forward keeps for backward over N tokens, besides its input x (model.ts `Saved`). */
function layerSaved(c: ModelConfig, N: number, rank: number, nTargets: number, weightBytes: number): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  // Per-head q/k norms: the q|k|v product they read (fused), or q and k before them and their rstd.
  const qkApart = f(N * H * D) + f(N * KV * D) + f(N * H) + f(N * KV);
  const qk = c.qkNorm ? (qkvFused(c, weightBytes) ? f(N * (H + 2 * KV) * D) : qkApart) : 0;
  const sandwich = c.sandwichNorms ? 2 * f(N * C) + 2 * f(N) : 0; // ao, rstdA, mo, rstdM (Gemma)
  return (
    sandwich +
    f(N * C) +
    f(N) + // h1, rstd1
    f(N * H * D) +
    2 * f(N * KV * D) +
    qk + // q, k, v (and their pre-norm forms)
    f(N * H * D) +
    f(N * H) + // o, lse
    2 * f(N * C) +
    f(N) + // xMid, h2, rstd2
    gateUp(c, N, weightBytes) +
    f(N * F) + // g, u, a
    nTargets * f(N * rank) // LoRA intermediates
  );
}

/** The largest set of gradients in flight inside one layer's backward (MLP part, then attention part). */
function layerGrads(
  c: ModelConfig,
  N: number,
  rank: number,
  targets: readonly LoraTarget[],
  chunk: number | undefined,
  weightBytes: number,
): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  const branch = c.sandwichNorms ? f(N * C) : 0; // Gemma: the branch norm's input gradient (its weight is frozen)
  // LoRA dt of a group of `members` targets that share an input (q, k, v; gate, up; else one target), and where the
  // gradients' sums over N are split, one dispatch's partial sums (a split per chunk, `rows` rows of R): dA's for the
  // group (its inputs), dB's for the group where its outputs are one product, else for one target.
  const splits = chunk ? Math.ceil(N / chunk) : 1;
  const lora = (members: number, rows: number) =>
    rank ? f(N * rank * members) + (splits > 1 ? f(splits * rows * rank) : 0) : 0;
  const has = (t: LoraTarget) => (targets.includes(t) ? 1 : 0);
  const gu = Math.max(1, has("gate") + has("up"));
  const guRows = gateUpFused(c, weightBytes) ? gu * Math.max(C, F) : Math.max(F, gu * C);
  const qkvN = has("q") + has("k") + has("v");
  const outs = [has("q") * H * D, has("k") * KV * D, has("v") * KV * D];
  const qkvOut = qkvFused(c, weightBytes) ? outs[0] + outs[1] + outs[2] : Math.max(...outs);
  const attnLora = Math.max(lora(1, Math.max(C, H * D)), qkvN ? lora(qkvN, Math.max(qkvOut, qkvN * C)) : 0);
  // With tensor cores in backward, an input gradient's scale (absMax: its max and 512 partial maxima) is live too.
  const scale = f(513);
  const mlpLora = Math.max(lora(1, Math.max(C, F)), lora(gu, guRows));
  const mlp = f(N * F) + gateUp(c, N, weightBytes) + f(N * C) + mlpLora + branch + scale; // da, dg, du, dh2, LoRA
  // dq|dk|dv packed for one matmul (the q/k norms' backward in place on it), or dq and dk before the norms.
  const dqkv = qkvFused(c, weightBytes) ? f(N * (H + 2 * KV) * D) : 0;
  const qk = c.qkNorm && !dqkv ? f(N * H * D) + f(N * KV * D) : 0;
  const attn = 2 * f(N * H * D) + 2 * f(N * KV * D) + f(N * H) + qk + f(N * C) + dqkv + attnLora + branch + scale; // do, dq, dk, dv, delta, dh1, LoRA
  return Math.max(mlp, attn);
}

/**
 * One inference step of N tokens sampling S rows: the step's inputs, one layer's temporaries, then the logits. Up to
 * decodeRows tokens the layers run model.ts's decodeLayer (fewer temporaries), above it one op at a time.
 */
function inferencePeak(
  c: ModelConfig,
  N: number,
  S: number,
  rank: number,
  weightBytes: number,
  decodeRows = DECODE_ROWS,
  ropeInMatvec = false,
  q4: Q4Scratch = NO_Q4,
): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D, vocabSize: V } = c;
  const inputs = f(N) + f(2 * N) + f(N * C); // ids, (slot, pos), x
  // Gemma: the o_proj / down_proj output and its rstd, and the new residual (the old one plus the normed output, one
  // pass) beside the old one.
  const sandwich = c.sandwichNorms ? 2 * f(N * C) + f(N) : 0;
  const t = (projections: number) => (rank ? f(N * projections * rank) : 0); // LoRA x·Aᵀ
  let layer: number;
  if (N <= decodeRows) {
    // q, with the packed q|k|v and the LoRA t of its matvec (no packed q|k|v where RoPE rides in the matvec), then
    // with o and lse around attention; o with the o_proj's t; the MLP's activation with gate|up's t, then with down's.
    const qkv = ropeInMatvec && !c.qkNorm ? 0 : f(N * (H + 2 * KV) * D);
    const attn = f(N * H * D) + Math.max(qkv + t(3), f(N * H * D) + f(N * H));
    const oProj = f(N * H * D) + t(1) + sandwich;
    const mlp = f(N * F) + Math.max(t(2), t(1) + sandwich);
    layer = Math.max(attn, oProj, mlp);
  } else {
    const gu = gateUp(c, N, weightBytes);
    // o, lse, h2, rstd2, g, u and a, with gate|up's LoRA t (one group of 2 x rank), then down's t and the sandwich's.
    const rest = f(N * H * D) + f(N * H) + f(N * C) + f(N) + gu + f(N * F) + Math.max(t(2), t(1) + sandwich);
    if (qkvFused(c, weightBytes)) {
      // h1, rstd1 and q held through the layer; the packed q|k|v only until ropeQkv has split it (k, v: the cache).
      layer = f(N * C) + f(N) + f(N * H * D) + Math.max(f(N * (H + 2 * KV) * D) + t(3), rest);
    } else {
      // q/k before their norms (Qwen3) are freed before attention, so they never meet the MLP's buffers.
      const qkv = f(N * C) + f(N) + f(N * H * D) + 2 * f(N * KV * D); // h1, rstd1, q, k, v
      const qk = c.qkNorm ? f(N * H * D) + f(N * KV * D) + f(N * H) + f(N * KV) : 0;
      layer = qkv + Math.max(qk, rest);
    }
  }
  // Rows, their gathered states (normed apart above decodeRows rows), logits, sampling's params, mask and outputs.
  const normed = S > decodeRows ? f(S * C) + f(S) : 0;
  const head = f(S) + f(S * V) + f(S * C) + normed + f(6 * S) + f(S * Math.ceil(V / 32)) + 2 * f(S);
  return inputs + Math.max(layer + q4.layer, head + q4.head) + UNIFORMS;
}

/** Bytes of a uniform chunk (@webart/gpu's UNIFORM_CHUNK), and of a dispatch's parameters in it at most (its offset
 *  alignment, 256 on the devices webart has met). */
const UNIFORM_SLOT = 256;

/** The split sampler's partial results (sample partials, rows below SPLIT_ROWS of @webart/shaders). */
const samplePartials = (S: number, split = 1) => (S < 16 ? f(S * split * 8) : 0);

/** Split-KV's partial outputs and their max and sum in a decode step of S rows (attention's decodeSplit: at most
 *  ceil(target / workgroups) chunks, a workgroup a row's group of up to H / KV heads), where a context of 128 keys
 *  or more can split. */
function splitKvBytes(c: ModelConfig, S: number, target: number, kvContext: number): number {
  if (!target || kvContext < 128) return 0;
  const rows = target * (c.numHeads / c.numKvHeads) + S * c.numHeads; // split x S x H, at most
  return f(rows * c.headDim) + f(rows * 2);
}

/**
 * A decode run (ModelRunner.decode: `steps` steps of S rows, one token a sequence, replaying a captured step): the
 * tape (Recorder.capture) holds every buffer its step handed out, one per temporary of a layer (the layers reuse
 * them), its inputs, the logits and its uniforms; beside it, one step's own buffers (its input ids, positions,
 * sampling's params and outputs) and uniforms, and every step's readbacks until the run ends. An upper bound: where
 * two temporaries share a pool bucket and never live at once, the tape holds one.
 */
function decodeRunPeak(
  c: ModelConfig,
  S: number,
  rank: number,
  weightBytes: number,
  o: {
    decodeRows: number;
    ropeInMatvec: boolean;
    q4: Q4Scratch;
    steps: number;
    splitKv: number;
    sampleSplit: number;
    kvContext: number;
  },
): number {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D, vocabSize: V, numLayers: L } = c;
  const t = (projections: number) => (rank ? f(S * projections * rank) : 0); // LoRA x·Aᵀ (o's and down's: one)
  const sandwich = c.sandwichNorms; // Gemma: each branch's output, its norm's rstd and the new residual
  const ldq = (H + 2 * KV) * D;
  let layer: number;
  let dispatches: number; // a layer's, with parameters (a uniform slot each), at most
  if (S <= o.decodeRows) {
    // decodeLayer: q, the packed q|k|v (none where RoPE rides in the matvec), o, lse, the MLP's activation.
    const qkv = o.ropeInMatvec && !c.qkNorm ? 0 : f(S * ldq);
    layer = 2 * f(S * H * D) + qkv + f(S * H) + f(S * F) + t(3) + t(2) + t(1);
    layer += sandwich ? 4 * f(S * C) + f(S) : 0; // ao, mo, two residuals, the branch rstd
    dispatches = 4 + (qkv ? 1 : 0) + 2 + (rank ? 4 : 0) + (sandwich ? 2 : 0);
  } else {
    // layer(), in place: h1, rstd1, q, q|k|v (or k and v; the q/k norms' outputs), o, lse, h2, rstd2, gate|up, a.
    const fused = qkvFused(c, weightBytes);
    const qk = c.qkNorm && !fused ? f(S * H * D) + f(S * KV * D) + f(S * H) + f(S * KV) : 0;
    layer = 2 * (f(S * C) + f(S)) + 2 * f(S * H * D) + f(S * H) + f(S * F) + gateUp(c, S, weightBytes);
    layer += (fused ? f(S * ldq) : 2 * f(S * KV * D)) + qk + t(3) + t(2) + t(1);
    layer += sandwich ? 4 * f(S * C) + 2 * f(S) : 0; // ao, rstdA, xMid, mo, rstdM, xOut
    dispatches = 16 + (rank ? 6 : 0) + (sandwich ? 2 : 0);
  }
  if (o.q4.layer) dispatches += 4; // the f16 copies' dequantizations
  // x, the final norm's rows above decodeRows, the logits.
  const head = f(S * C) + (S > o.decodeRows ? f(S * C) + f(S) : 0) + f(S * V) + o.q4.head;
  const headDispatches = 2 * Math.ceil(V / Q4_HEAD_ROWS) + 2; // embedding, norm, a shard's product (and its copy)
  const slots = L * (dispatches + (o.splitKv ? 1 : 0)) + headDispatches;
  const tapeUniforms = Math.ceil((slots * UNIFORM_SLOT) / UNIFORMS) * UNIFORMS;
  const tape = f(S) + f(2 * S) + layer + o.q4.layer + splitKvBytes(c, S, o.splitKv, o.kvContext) + head + tapeUniforms;
  // A step: the ids it feeds (the last step's sampled ids), its positions, sampling's params, partials and outputs,
  // its uniforms; each step's two readbacks (ids, logprobs).
  const step = f(S) + f(2 * S) + f(6 * S) + samplePartials(S, o.sampleSplit) + 2 * f(S) + UNIFORMS;
  return tape + step + 2 * o.steps * f(S);
}

/** One training micro-batch of N tokens: the peak of the head phase and of the top layer's backward. */
function trainingPeak(
  c: ModelConfig,
  N: number,
  vocabChunk: number,
  rank: number,
  targets: readonly LoraTarget[],
  recompute: boolean,
  allowedSets = false,
  loraGradChunk?: number,
  weightBytes = 2,
  q4: Q4Scratch = NO_Q4,
): { peak: number; perLayer: number } {
  const { hiddenSize: C, numLayers: L } = c;
  const Vc = Math.min(vocabChunk, c.vocabSize);
  // ids, targets, old logprobs, (slot, pos), GRPO meta (packGrpoMeta: advantage, weight, sequence, KL weight); and
  // the allowed sets (a header word a row, a mask a row).
  const inputs =
    3 * f(N) + f(2 * N) + f(GRPO_META_WORDS * N) + (allowedSets ? f(N + N * Math.ceil(c.vocabSize / 32)) : 0);
  const saved = layerSaved(c, N, rank, targets.length, weightBytes);
  const x = f(N * C);
  // Kept through the step: each layer's input, everything else of every layer unless recomputed, the output.
  const kept = L * x + (recompute ? 0 : L * saved) + x;
  const final = f(N * C) + f(N); // hN, rstdN
  // Head: logprobs (lp, entropy, lse, dloss, per-token terms), dhN and one logits chunk, during its backward.
  const head = kept + final + 4 * f(N) + f(4 * N) + f(N * C) + f(N * Vc) + f(513) + q4.head; // + dlogits' scale (see layerGrads)
  // Top layer's backward: the kept inputs, dx, dhN, the layer's saved set (recomputed or kept) and its gradients.
  const back =
    L * x +
    (recompute ? saved : L * saved) +
    2 * f(N * C) +
    layerGrads(c, N, rank, targets, loraGradChunk, weightBytes) +
    q4.layer;
  const perLayer = x + (recompute ? 0 : saved);
  return { peak: inputs + Math.max(head, back) + UNIFORMS, perLayer };
}

export function planMemory(c: ModelConfig, s: PlanSetup): MemoryPlan {
  const { hiddenSize: C, intermediateSize: F, numKvHeads: KV, headDim: D, numLayers: L, vocabSize: V } = c;
  const w = weightBytes(c, s.weightBytes, s.quantize === "q4");
  const weights = s.sharedWeights ? 0 : w.bytes;
  // Bytes an element of the projections' buffers (the loader's layout, which decides what runs as one product).
  const wb = s.quantize === "q4" ? 0.5 : s.weightBytes;
  const scratch = s.quantize === "q4" ? q4Scratch(c) : NO_Q4;
  let largest = w.largest;
  let largestWhat = "a weight tensor";
  /** Keeps the largest binding and names it. */
  const bind = (bytes: number, what: string) => {
    if (bytes > largest) [largest, largestWhat] = [bytes, what];
  };
  const rank = s.lora?.rank ?? 0;
  const targets = s.lora?.targets ?? [];
  const loraParams = s.lora ? loraParameterCount(c, rank, targets) : 0;
  const merged = s.lora && s.mergeLora && !s.quantize ? mergedWeightBytes(c, s.weightBytes) : { bytes: 0, largest: 0 };
  const lora = s.lora ? exact(loraParams * F32) + merged.bytes : 0;
  bind(merged.largest, "a weight tensor's merged f32 copy");
  // Gradients and both AdamW moments (LoraState.ensureOptimizer).
  const optimizer = s.train && s.lora ? 3 * exact(loraParams * F32) : 0;
  const kvLayer = exact(s.kvSlots * s.kvContext * KV * D * F32);
  const kvCache = 2 * L * kvLayer;
  bind(kvLayer, `a layer's KV cache (${s.kvSlots} sequences x ${s.kvContext} tokens)`);
  const N = s.prefillChunk + s.kvSlots;
  const decodeRows = s.decodeRows ?? DECODE_ROWS;
  // The larger of a step of the prefill chunk and every slot's decode row, and a run of decode steps beside the one
  // they replay.
  const stepPeak =
    inferencePeak(c, N, s.kvSlots, rank, wb, decodeRows, s.ropeInMatvec, scratch) +
    samplePartials(s.kvSlots, s.sampleSplit);
  const decodeRun = decodeRunPeak(c, s.kvSlots, rank, wb, {
    decodeRows,
    ropeInMatvec: !!s.ropeInMatvec,
    q4: scratch,
    steps: s.decodeAhead ?? 8,
    splitKv: s.splitKvTarget ?? 128,
    sampleSplit: s.sampleSplit ?? 1,
    kvContext: s.kvContext,
  });
  const inference = Math.max(stepPeak, decodeRun);
  // A token's widest activation: gate|up (2F, one product where the loader packs them), or q|k|v.
  const wide = Math.max(2 * F, c.numHeads * D + 2 * KV * D, C);
  bind(s.kvSlots * V * F32, `the logits of ${s.kvSlots} decode rows`);
  bind(
    N * wide * F32,
    `the widest activation of a ${N}-token inference step (prefill chunk ${s.prefillChunk} + ${s.kvSlots} decode rows)`,
  );
  let training = 0;
  let trainingPerLayer = 0;
  if (s.train) {
    const N = s.train.microBatchTokens;
    const t = trainingPeak(
      c,
      N,
      s.vocabChunk,
      rank,
      targets,
      s.train.recompute,
      s.train.allowedSets,
      s.loraGradChunk,
      wb,
      scratch,
    );
    // Through the gradient: the loss totals and a row per token of the whole step (its entropy, and its logprob
    // when asked), read at the end (grpo.ts startStep). Then the optimizer's partial sums, alone (optimizerStep).
    const rows = exact((s.train.stepTokens ?? N) * F32);
    const step = exact(grpoTotalsBytes) + (s.train.logprobs ? 2 : 1) * rows;
    training = Math.max(t.peak + step, exact(adamwPartsBytes) + exact(adamwStatsBytes) + UNIFORMS);
    trainingPerLayer = t.perLayer;
    bind(N * Math.min(s.vocabChunk, V) * F32, `a ${N}-token micro-batch's logits chunk`);
    bind(N * wide * F32, `the widest activation of a ${N}-token micro-batch`);
  }
  bind(scratch.layer, "a layer's f16 copy of q4 weights");
  bind(scratch.head, "the LM head's f16 copy of q4 weights");
  const held = weights + lora + optimizer + kvCache;
  const tuning = s.tuning ?? 0;
  // A q4 load quantizes on the GPU through a staging buffer, beside the weights uploaded so far.
  const qs = s.quantize === "q4" && !s.sharedWeights ? q4StagingBytes(c) : undefined;
  const quantizing = qs ? exact(qs.stage) + exact(qs.errors) + UNIFORMS : 0;
  const total = Math.max(held + Math.max(inference, training), weights + tuning, weights + quantizing);
  const mb = (b: number) => `${(b / MiB).toFixed(1)} MiB`;
  const lines = [
    `weights     ${mb(weights)} (${s.quantize ? (q4Rows(C) ? "q4 matrices" : `q4 projections, ${s.weightBytes === 2 ? "16-bit" : "f32"} embedding`) : s.weightBytes === 2 ? "16-bit matrices" : "f32 matrices"}${s.sharedWeights ? ", shared with another run: not counted" : ""})`,
    `lora        ${mb(lora)}${s.lora ? ` (rank ${rank}, ${targets.join(",")}, ${loraParams} params)` : ""}`,
    `optimizer   ${mb(optimizer)} (gradients + AdamW moments)`,
    `kv cache    ${mb(kvCache)} (${s.kvSlots} sequences x ${s.kvContext} tokens)`,
    `inference   ${mb(inference)} (prefill chunk ${s.prefillChunk} + ${s.kvSlots} decode rows${s.quantize ? `; with f16 copies of q4 weights: ${mb(scratch.layer)} in a layer, ${mb(scratch.head)} in the LM head` : ""})`,
    `training    ${mb(training)}${s.train ? ` (${s.train.microBatchTokens} tokens per micro-batch${s.train.stepTokens ? ` of a ${s.train.stepTokens}-token step` : ""}, recompute ${s.train.recompute ? "on" : "off"}, vocab chunk ${Math.min(s.vocabChunk, V)})` : ""}`,
    ...(tuning ? [`tuning      ${mb(tuning)} (at start-up, beside the weights alone)`] : []),
    ...(quantizing
      ? [`quantizing  ${mb(quantizing)} (q4 at load: a chunk of a tensor at a time, beside the weights)`]
      : []),
    `total       ${mb(total)}`,
  ];
  return {
    weights,
    lora,
    optimizer,
    kvCache,
    inference,
    inferenceStep: stepPeak,
    decodeRun,
    training,
    trainingPerLayer,
    tuning,
    total,
    peakInference: held + inference,
    peakTraining: held + training,
    largestBinding: largest,
    largestWhat,
    lines,
  };
}

export class PlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PlanError";
  }
}

/**
 * `make()`'s plan, made again without the merged copy of the weights (`setup.mergeLora`, which it reads) where the
 * plan with it is refused: the copy is a speed-up, not a need. With `keep` (the copy asked for), refused as it is.
 */
export function planDroppingMerge<T>(setup: { mergeLora?: boolean }, make: () => T, keep = false): T {
  try {
    return make();
  } catch (e) {
    if (!(e instanceof PlanError) || keep || !setup.mergeLora) throw e;
    setup.mergeLora = false;
    return make();
  }
}

const gib = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
/** A binding's size for the refusal: KiB below 1 MiB, then MiB to two decimals, GiB to three. */
const size = (b: number) =>
  b < MiB
    ? `${(b / 1024).toFixed(1)} KiB`
    : b < 2 ** 30
      ? `${(b / MiB).toFixed(2)} MiB`
      : `${(b / 2 ** 30).toFixed(3)} GiB`;

/** The plan's parts, largest first, as "training 1.20 GiB, weights 0.92 GiB, ...". */
function largestParts(p: MemoryPlan): string {
  const parts: [string, number][] = [
    ["weights", p.weights],
    ["LoRA", p.lora],
    ["optimizer state", p.optimizer],
    ["KV cache", p.kvCache],
    [p.training > p.inference ? "training activations" : "inference working set", Math.max(p.training, p.inference)],
    ["start-up tuning", p.tuning],
  ];
  return parts
    .filter(([, b]) => b > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([n, b]) => `${n} ${gib(b)}`)
    .join(", ");
}

/**
 * Throws a PlanError naming what does not fit: a binding over the device's limit, or the total (plus
 * `inUse`, bytes already live on the device) over the budget.
 */
export function checkPlan(plan: MemoryPlan, limits: AdapterLimits, budgetBytes?: number, inUse = 0): void {
  const bind = Math.min(limits.maxStorageBufferBindingSize, limits.maxBufferSize);
  if (plan.largestBinding > bind) {
    throw new PlanError(
      `memory plan: ${plan.largestWhat} (${size(plan.largestBinding)}) exceeds the device's ` +
        `${size(bind)} storage binding; use fewer KV slots, a shorter context, a smaller prefill chunk or fewer tokens per micro-batch.`,
    );
  }
  if (budgetBytes !== undefined && plan.total + inUse > budgetBytes) {
    throw new PlanError(
      `memory plan: ${gib(plan.total)} needed${inUse ? ` besides ${gib(inUse)} already in use` : ""} but the memory budget is ${gib(budgetBytes)}. ` +
        `Largest parts: ${largestParts(plan)}.\n  ` +
        plan.lines.join("\n  ") +
        "\nTo fit: fewer tokens per micro-batch, a smaller LoRA rank, a shorter context or fewer KV slots, or a larger --memory-budget if the GPU has the memory.",
    );
  }
}

export interface TrainChoice {
  microBatchTokens: number;
  recompute: boolean;
  vocabChunk: number;
  plan: MemoryPlan;
}

/**
 * Chooses how a training step runs within the budget: the requested micro-batch without recompute if it
 * fits, else smaller micro-batches (down to the longest sequence, or 1024 tokens), then recompute with the
 * largest micro-batch that fits, shrinking the vocabulary chunk last. `longest` is the longest sequence of
 * the step (a micro-batch holds whole sequences). Refuses with a PlanError when nothing fits.
 */
export function planTraining(
  c: ModelConfig,
  base: Omit<PlanSetup, "train" | "vocabChunk">,
  limits: AdapterLimits,
  budget: number | undefined,
  want: {
    microBatchTokens: number;
    longest: number;
    recompute?: boolean;
    vocabChunk?: number;
    /** Bytes live on the device besides this plan (other runs). */
    inUse?: number;
    /** Bytes live now that already include this plan's weights, adapter, optimizer and KV cache (a loaded run
     *  before its step): only the step's working set is added to them. */
    held?: number;
    /** Some rows carry allowed sets (PlanSetup.train.allowedSets). */
    allowedSets?: boolean;
    /** The step's tokens and whether it reads their logprobs back (PlanSetup.train.stepTokens, .logprobs). */
    stepTokens?: number;
    logprobs?: boolean;
    /** The step's sequences (default: as many as the micro-batch holds). */
    sequences?: number;
  },
): TrainChoice {
  const V = c.vocabSize;
  const longest = Math.max(1, want.longest);
  // A micro-batch is whole sequences padded to its longest, so none holds more than longest x sequences: a short step
  // is planned (and reported) at what it can hold, not at the run's micro-batch.
  const cap = want.sequences ? Math.min(want.microBatchTokens, longest * want.sequences) : want.microBatchTokens;
  const top = Math.max(cap, longest);
  const sizes: number[] = [];
  for (let n = top; n > longest; n = Math.floor(n / 2)) sizes.push(n);
  sizes.push(longest);
  const chunks = [Math.min(want.vocabChunk ?? 8192, V)];
  for (let v = chunks[0] >> 1; v >= 1024; v >>= 1) chunks.push(v);
  const tries: { n: number; recompute: boolean; vc: number }[] = [];
  const modes = want.recompute === undefined ? [false, true] : [want.recompute];
  for (const recompute of modes) {
    // Without recompute, micro-batches shrink only while they stay large enough to keep a GPU busy.
    const ns =
      recompute || want.recompute === false ? sizes : sizes.filter((n) => n === top || n >= Math.min(1024, top));
    for (const n of ns) for (const vc of chunks) tries.push({ n, recompute, vc });
  }
  let last: { n: number; recompute: boolean; vc: number } | undefined;
  let lastErr: unknown;
  for (const t of tries) {
    const train = {
      microBatchTokens: t.n,
      recompute: t.recompute,
      allowedSets: want.allowedSets,
      stepTokens: want.stepTokens,
      logprobs: want.logprobs,
    };
    const plan = planMemory(c, { ...base, vocabChunk: t.vc, train });
    try {
      if (want.held === undefined) checkPlan(plan, limits, budget, want.inUse ?? 0);
      else checkPlan({ ...plan, total: plan.training }, limits, budget, want.held);
      return { microBatchTokens: t.n, recompute: t.recompute, vocabChunk: t.vc, plan };
    } catch (e) {
      last = t;
      lastErr = e;
    }
  }
  const why = (lastErr as Error).message.replace(/^memory plan: /, "");
  throw new PlanError(
    `training does not fit even with ${last!.n} tokens per micro-batch, recompute ${last!.recompute ? "on" : "off"} and a ` +
      `${last!.vc}-column vocabulary chunk, the smallest step tried (the longest sequence has ${longest} tokens): ${why}`,
  );
}

/** Parses "8GB", "6GiB", "512MiB", "4e9" (bytes) into bytes; throws naming the flag for anything else. */
export function parseBytes(text: string, what = "--memory-budget"): number {
  const m = /^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)?\s*$/i.exec(text);
  const unit: Record<string, number> = {
    b: 1,
    kb: 1e3,
    kib: 2 ** 10,
    mb: 1e6,
    mib: 2 ** 20,
    gb: 1e9,
    gib: 2 ** 30,
    tb: 1e12,
    tib: 2 ** 40,
  };
  const v = m ? Number(m[1]) * unit[(m[2] ?? "b").toLowerCase()] : NaN;
  if (!Number.isFinite(v) || v <= 0) {
    throw new PlanError(`${what} "${text}" is not a size: write it like 8GB, 6GiB or 4096MiB`);
  }
  return Math.floor(v);
}

/**
 * The memory budget when none is given. WebGPU does not tell how much memory a GPU has: browsers get 4 GiB
 * (what integrated GPUs and a tab commonly allow), Node 16 GiB on a GPU and 8 GiB on a CPU device.
 */
export function defaultMemoryBudget(where: { browser: boolean; cpuDevice: boolean }): number {
  if (where.browser) return 4 * 2 ** 30;
  return (where.cpuDevice ? 8 : 16) * 2 ** 30;
}
