// The transformer, top to bottom: config → forward (prefill/decode against the KV cache, or a training
// micro-batch that keeps what backward needs) → backward mirroring forward in reverse, into LoRA A/B.
// Llama and Mistral, Qwen2 (q/k/v bias), Qwen3 (per-head q/k RMSNorm) and Gemma 3 (q/k RMSNorm, scaled
// embedding, GeGLU, the attention and MLP outputs normed before their residual adds, sliding-window layers with
// their own RoPE). No autograd: each op has its backward.
//
// Shapes: N tokens in the batch, B sequences of T (training), C = hidden, H heads, KV kv-heads, D head dim,
// F = MLP width, V vocab, R LoRA rank, S sampled rows.
import { isCpuDevice, sizeOf, type Binding, type Gpu, type Recorder } from "@webart/gpu";
import {
  ABSMAX_BYTES,
  absMax,
  attentionBackward,
  attentionDecode,
  attentionForward,
  embeddingForward,
  tableViews,
  kvcacheWrite,
  loraBackwardGroup,
  loraForwardGroup,
  loraMerge,
  matmul,
  matvec,
  matvecRopeFits,
  matvecRopePairs,
  q4Streamable,
  rmsnormForward,
  rmsnormBackward,
  ropeBackward,
  ropeBackwardPack,
  qkNormBackwardPacked,
  ropeForward,
  ropeInvFreq,
  ropeQkv,
  q4Dequant,
  q4DequantBytes,
  q4Gather,
  swigluBackward,
  swigluBackwardPacked,
  swigluForward,
  swigluForwardPacked,
  type KernelTuning,
  type LoraGroupTarget,
  type MatmulOptions,
  type MatvecBuffers,
  type MatvecOptions,
  type MatvecSegment,
  type RmsnormBuffers,
  type WeightShard,
} from "@webart/shaders";
import { FINAL_NORM, NORMS, layerTensor, type ModelConfig } from "../config/index.ts";
import { LORA_TARGETS, type LoraTarget } from "../plan.ts";
import { DECODE_ROWS } from "./decode-rows.ts";
import type { KvCache } from "./kv.ts";
import type { LoraEntry, LoraState } from "./lora.ts";
import { freeWeights, oneBuffer, Q4_HEAD_ROWS, type GpuWeights, type Matrix, type Vector } from "./weights.ts";

/** Where a forward's keys and values live: the inference KV cache, or a training micro-batch (B, T). */
export type Attend =
  | { kind: "cache"; kv: KvCache; slotPos: GPUBuffer; decode: boolean; maxLen: number }
  | {
      kind: "train";
      B: number;
      T: number;
      slotPos: GPUBuffer;
      /** Full fine-tuning: the per-head q/k norms' weights take gradients, so their products run apart (qkvProduct). */
      normGrads?: boolean;
    };

/** What one layer's forward keeps for its backward (training only). */
interface Saved {
  x: GPUBuffer; // (N, C) layer input
  h1: GPUBuffer; // (N, C)
  rstd1: GPUBuffer; // (N)
  /** (N, (H + 2 KV) D) the q|k|v product before the per-head q/k norms, where they ran in ropeQkv (qkvProduct). */
  qkv?: GPUBuffer;
  qPre?: GPUBuffer; // (N, H*D) before q_norm (Qwen3), where the norms ran apart
  kPre?: GPUBuffer; // (N, KV*D)
  rstdQ?: GPUBuffer; // (N*H)
  rstdK?: GPUBuffer; // (N*KV)
  q: GPUBuffer; // (N, H*D) after RoPE
  k: GPUBuffer; // (B, T, KV, D) after RoPE
  v: GPUBuffer; // (B, T, KV, D)
  o: GPUBuffer; // (N, H*D) attention output
  lse: GPUBuffer; // (N, H)
  ao?: GPUBuffer; // (N, C) o_proj output before its norm (Gemma)
  rstdA?: GPUBuffer; // (N)
  xMid: GPUBuffer; // (N, C) residual after attention
  h2: GPUBuffer; // (N, C)
  rstd2: GPUBuffer; // (N)
  /** The gate and up products: apart, (N, F) each, or side by side in the rows of one (N, 2F) (gateUp). */
  gate: { g: GPUBuffer; u: GPUBuffer } | { gu: GPUBuffer };
  a: GPUBuffer; // (N, F) act(g) * u
  mo?: GPUBuffer; // (N, C) down_proj output before its norm (Gemma)
  rstdM?: GPUBuffer; // (N)
  /** The LoRA intermediates t = x·Aᵀ, side by side for the targets that share an input (q, k, v; gate, up). */
  t: { qkv?: LoraGroupT; o?: LoraGroupT; gateUp?: LoraGroupT; down?: LoraGroupT };
}

/** Targets' t = x·Aᵀ side by side in one (N, ld) buffer, each at its members' tCol (loraForwardGroup). */
interface LoraGroupT {
  buf: GPUBuffer;
  ld: number;
  in: number;
  members: (LoraGroupTarget & { target: LoraTarget })[];
}

/** Under recompute, all a layer keeps between forward and backward: its input. */
interface LayerInput {
  x: GPUBuffer; // (N, C)
}

export interface Activations {
  N: number;
  /** Per layer, everything backward needs, or (recompute) only the layer's input. */
  layers: (Saved | LayerInput)[];
  /** (N, C) input of the final norm, and the normed states with their rstd. */
  xL: GPUBuffer;
  hN: GPUBuffer;
  rstdN: GPUBuffer;
  /** The (slot, pos) pairs the forward used; backward rotates gradients with the same positions. */
  slotPos: GPUBuffer;
  /** The attention layout of the forward, for recompute. */
  attend: Attend;
}

/** Bytes released in an open recorder past which a layer boundary submits, so the pool can reuse them. */
const FLUSH_BYTES = 4 * 2 ** 20;

/**
 * The base weights' own gradients, for full fine-tuning (train/sft.ts provides them): backward calls these where
 * a base weight's gradient arises. LoRA training passes none; its gradients go to lora.grads.
 */
export interface WeightGrads {
  /** The LM head's rows v0..v1: dW += dlogitsᵀ · h, with dlogits (M, v1-v0) and h (M, C). */
  head(rec: Recorder, dlogits: GPUBuffer, h: GPUBuffer, M: number, v0: number, v1: number): void;
  /** Linear `t` of layer l: dW += dyᵀ · x (and its bias), with x (N, in) and dy (N, out); `cols`: dy is the columns
   *  [offsetDy, offsetDy + out) of rows lddy wide (gate and up share one gradient). */
  linear(
    rec: Recorder,
    l: number,
    t: LoraTarget,
    x: GPUBuffer,
    dy: GPUBuffer,
    N: number,
    cols?: { lddy: number; offsetDy: number },
  ): void;
  /** Where the gradient of the RMSNorm weight `name` (its HF tensor name, n values) accumulates. */
  norm(name: string, n: number): Binding;
  /** After the last layer: dx (N, C) is the gradient at the embedding's output. */
  embedding(rec: Recorder, dx: GPUBuffer): void;
}

/** Whether decode runs RoPE in the q|k|v matvec on this device (for models without q/k norms): where the device binds
 *  its buffers and tuning, if it ran, found it faster. The memory plan asks the same (PlanSetup.ropeInMatvec). */
export function ropeInMatvec(gpu: Gpu, tuning: KernelTuning): boolean {
  return matvecRopeFits(gpu) && tuning.rope?.inMatvec !== false;
}

export class Model {
  /** RoPE inverse frequencies of the full-attention layers, and of the sliding layers where they differ. */
  readonly invFreq: GPUBuffer;
  readonly invFreqLocal?: GPUBuffer;
  lora?: LoraState;
  /** Rows up to which inference runs its projections (and the LM head) as matvecs and its layers as decodeLayer:
   *  start-up tuning's choice for this device and shape (KernelTuning.decodeRows), at most DECODE_ROWS. A plan made
   *  for another bound (PlanSetup.decodeRows) does not hold after a change. */
  decodeRows: number;
  /** Inference over at most decodeRows tokens runs decodeLayer (the same math in fewer dispatches); off: every
   *  op its own dispatch, as training's forward (to compare the two). */
  fuseDecode = true;
  /** Training's and prefill's layer runs gate and up as one matmul where their weights sit back to back (gateUp);
   *  off: two, as before (to compare the two). */
  fuseGateUp = true;
  /** Training's and prefill's layer runs q, k and v as one matmul, then the per-head q/k norms (where the model has
   *  them), RoPE and the split in one dispatch, where their weights sit back to back (qkvProduct); off: three, as
   *  before. */
  fuseQkv = true;
  /** decodeLayer runs RoPE and the KV cache write in the q|k|v matvec's epilogue, where there are no per-head q/k
   *  norms, the device binds enough storage buffers (matvecRopeFits) and start-up tuning found it faster
   *  (RopeTuning.inMatvec; untuned: on); off: ropeQkv after the matvec. */
  fuseRope = true;

  /**
   * The forward (inference's, and training's) submits what it has recorded part-way through the layers, so the
   * device runs the first layers while the host records the rest: after the first layer, then every `submitLayers`
   * layers (0: once, with the logits and the sampling, or for training where its backward submits). Training's
   * backward submits a layer at a time anyway, once the layer has released its buffers (FLUSH_BYTES).
   * Recorder.submitPart: never ahead of another recorder's submit that waits its turn. Default: 4 on a GPU, 0 on a
   * CPU device (its work runs on the host's own cores).
   */
  submitLayers: number;

  /** Every fusion above on, or off (one dispatch per op: the baseline benches and tests compare with). */
  fuse(on: boolean): void {
    this.fuseDecode = this.fuseGateUp = this.fuseQkv = this.fuseRope = on;
  }
  /** Forward products with the weights (x·Wᵀ past decodeRows rows, the LM head's logits) run the coop matmul:
   *  tensor cores, f16 operands, f32 sums. Set by the engine where the device has them. */
  tensorCores = false;
  /** With tensorCores, backward's input gradients (dy·W, the LM head's dlogits·W) too: each dy is scaled by the power
   *  of two that brings its largest magnitude to [2^14, 2^15) before it is rounded to f16 (absMax, then the coop
   *  matmul's scaleA). The engine turns it on with tensorCores (EngineOptions.tensorCoresBackward). */
  tensorCoresBackward = false;
  /**
   * Inference with an adapter runs on f32 weights with the adapter merged in (W + s·B·A for each target, made again
   * after every change of the adapter: LoraState.version), as a model without one: no LoRA terms, none of their
   * dispatches. 16-bit weights merge into an f32 copy (W + s·B·A rounded to 16 bits would lose most of the adapter),
   * used by steps of up to decodeRows rows, whose matvecs are bound by their dispatches more than by their bytes;
   * longer steps (prefill, matmuls) keep the LoRA terms apart, as every model's do on tensor cores (runsMergedAt).
   * Training's forward and the adapter switched off run W itself. The engine turns it on (EngineOptions.mergeLora).
   */
  mergeLora = false;
  /** The merged weights: an f32 copy of each buffer that holds a target's weight, kept for one adapter. */
  private merged?: {
    lora: LoraState;
    version: number;
    /** Whether the weights no entry of the adapter changes are in: f32 buffers copied whole, 16-bit targets without
     *  an entry converted. */
    copied: boolean;
    weights: GpuWeights;
    buffers: GPUBuffer[];
  };
  /** Whether every projection's weight is f32: its merged copy serves steps of any length. */
  private readonly f32Targets: boolean;
  /** Whether every merged copy fits one storage binding (a 16-bit group's f32 copy is twice its size). */
  private readonly mergeFits: boolean;
  /** While a forward runs on the merged weights: the adapter's terms are in them. */
  private inMerged = false;

  constructor(
    readonly gpu: Gpu,
    readonly config: ModelConfig,
    readonly weights: GpuWeights,
    /** Start-up tuning's kernel choices for this model's shapes on this device; none: the device kind's defaults. */
    readonly tuning: KernelTuning = {},
  ) {
    const c = config;
    this.decodeRows = Math.min(DECODE_ROWS, tuning.decodeRows ?? DECODE_ROWS);
    this.submitLayers = isCpuDevice(gpu) ? 0 : 4;
    // On SwiftShader the q4 stream matvec ran 3.5-7x slower than the f16 copy with the CPU's tuned variant (Qwen2.5-0.5B's
    // widths, 4 layers, batch 1 and 8): the copy there; on a GPU, where bytes bound a matvec, the nibbles themselves
    // up to the rows start-up tuning found (16 untuned).
    this.q4MatvecRows = isCpuDevice(gpu) ? 0 : (tuning.q4Rows ?? 16);
    this.f32Targets = weights.layers.every((L) => LORA_TARGETS.every((t) => L[t].dtype === "f32"));
    this.mergeFits = [...this.mergedEnds().values()].every((end) => end * 4 <= gpu.maxStorageBinding);
    const table = (theta: number, s: ModelConfig["ropeScaling"], label: string) =>
      gpu.upload(ropeInvFreq(c.headDim, theta, s.type === "none" ? undefined : s), "weights", label);
    this.invFreq = table(c.ropeTheta, c.ropeScaling, "rope inv_freq");
    if (c.localRope) this.invFreqLocal = table(c.localRope.theta, c.localRope.scaling, "rope inv_freq (local)");
  }

  /** Returns the weights and the LoRA adapter's buffers to the pool; the model is unusable afterwards. */
  dispose(): void {
    this.lora?.dispose();
    this.lora = undefined;
    freeWeights(this.gpu, this.weights);
    this.releaseTables();
  }

  /** Frees what the model made for itself (the RoPE tables), not the weights it was given. */
  releaseTables(): void {
    this.gpu.release(this.invFreq, this.invFreqLocal);
    this.releaseMerged();
  }

  /** Bytes of the merged weights held now (Model.mergeLora; 0: none). */
  get mergedBytes(): number {
    return this.merged?.buffers.reduce((s, b) => s + sizeOf(b), 0) ?? 0;
  }

  /** Frees the merged weights (Model.mergeLora), if any. */
  releaseMerged(): void {
    if (this.merged) this.gpu.release(...this.merged.buffers);
    this.merged = undefined;
  }

  /** Allocates the merged weights now, where inference will run on them (they are held with the adapter, as the plan
   *  counts them), rather than at the first forward, which fills them. */
  prepareMerged(): void {
    if (this.runsMerged) this.mergedState();
  }

  /** Whether inference now runs on merged weights (mergeLora, an adapter on, each copy within a storage binding): an
   *  f32 model's steps, a 16-bit one's of up to decodeRows rows (runsMergedAt). */
  get runsMerged(): boolean {
    return this.mergeLora && this.useLora && this.mergeFits && !this.quantized;
  }

  /** Whether the layers' projections are q4 (EngineOptions.quantize): no merged copy, whose f32 would be 7x their
   *  bytes. */
  get quantized(): boolean {
    return this.weights.layers[0]?.q.dtype === "q4";
  }

  /** Elements of the f32 copy of each buffer that holds a target's weight: an f32 buffer whole, a 16-bit one up to
   *  its last target's end, at the targets' own element offsets (plan.ts mergedWeightBytes counts the same). */
  private mergedEnds(): Map<GPUBuffer, number> {
    const ends = new Map<GPUBuffer, number>();
    for (const L of this.weights.layers)
      for (const t of LORA_TARGETS) {
        const W = L[t];
        const end = W.dtype === "f32" ? sizeOf(W.buffer) / 4 : W.offset + W.rows * W.cols;
        ends.set(W.buffer, Math.max(ends.get(W.buffer) ?? 0, end));
      }
    return ends;
  }

  /**
   * Whether an inference forward of N rows runs on the merged weights: every step of an f32 model without tensor
   * cores; else only steps whose layers run as matvecs (decodeLayer). Tensor cores round their operands to f16, and
   * W + s·B·A rounded to f16 would lose the part of the adapter's change below W's last bits, which training (its
   * terms apart, in f32) keeps; a 16-bit model's f32 copy is for decode's dispatch-bound steps.
   */
  runsMergedAt(N: number): boolean {
    if (!this.runsMerged) return false;
    if (this.f32Targets && !this.tensorCores) return true;
    return N <= this.decodeRows && this.fuseDecode && this.weights.layers.every((_, l) => this.decodeFusable(l));
  }

  /** The merged weights' buffers for the current adapter, allocated (not yet filled) when there are none. */
  private mergedState(): NonNullable<Model["merged"]> {
    const lora = this.lora!;
    if (this.merged && this.merged.lora !== lora) this.releaseMerged();
    if (this.merged) return this.merged;
    const copies = new Map<GPUBuffer, GPUBuffer>();
    for (const [buf, end] of this.mergedEnds()) copies.set(buf, this.gpu.buffer(end * 4, "lora", "merged weights"));
    const layers = this.weights.layers.map((L) => {
      const out = { ...L };
      for (const t of LORA_TARGETS) out[t] = { ...L[t], buffer: copies.get(L[t].buffer)!, dtype: "f32" as const };
      return out;
    });
    const buffers = [...copies.values()];
    return (this.merged = { lora, version: -1, copied: false, weights: { ...this.weights, layers }, buffers });
  }

  /**
   * The weights with the adapter merged in, brought up to its version first, in `rec` before the forward's work (so
   * in order with it, also where the forward submits part-way): the buffers holding a target's weight copied once
   * per adapter, then every target's W + s·B·A written over its range (lora_merge). Made again by the next call if
   * `rec` does not run.
   */
  private mergedWeights(rec: Recorder): GpuWeights {
    const gpu = this.gpu;
    const lora = this.lora!;
    const m = this.mergedState();
    if (m.version === lora.version) return m.weights;
    const merge = (W: Matrix, merged: GPUBuffer, e?: LoraEntry) => {
      if (W.dtype === "q4") throw new Error("Model: inference on merged weights is not for q4 weights (runsMerged)");
      const d = { rows: W.rows, cols: W.cols, offsetW: W.offset, wDtype: W.dtype };
      const ab = e ? { rank: e.rank, a: e.a, b: e.b, scale: e.scale } : { rank: 0, a: 0, b: 0, scale: 0 };
      loraMerge(gpu, rec, { w: W.buffer, params: lora.params, merged }, { ...d, ...ab });
    };
    if (!m.copied) {
      const copied = new Set<GPUBuffer>();
      this.weights.layers.forEach((L, l) => {
        for (const t of LORA_TARGETS) {
          const [W, dst] = [L[t], m.weights.layers[l][t].buffer];
          if (W.dtype !== "f32") {
            if (!lora.byLayer[l].get(t)) merge(W, dst);
          } else if (!copied.has(W.buffer)) {
            rec.copy(W.buffer, 0, dst, 0, sizeOf(W.buffer));
            copied.add(W.buffer);
          }
        }
      });
      m.copied = true;
    }
    for (const e of lora.entries) {
      const W = this.weights.layers[e.layer][e.target];
      merge(W, m.weights.layers[e.layer][e.target].buffer, e);
    }
    m.version = lora.version;
    rec.onFail(() => {
      m.version = -1;
      m.copied = false;
    });
    return m.weights;
  }

  /**
   * Everything besides its arguments that decides what an inference forward and its logits record: the weights,
   * the adapter in use and its version (which the merged weights follow), the merged weights, the fusions and the
   * kernel choices (each family's, and the two that benches flip in place), and where the forward submits part-way.
   * ModelRunner replays a decode step it captured while each of these is the same object or value.
   */
  recordingState(): unknown[] {
    const l = this.lora;
    const m = this.merged;
    const t = this.tuning;
    return [
      this.weights,
      t,
      t.matmul,
      t.matvec,
      t.matvec?.columnsAbove,
      t.attention,
      t.lora,
      t.rmsnorm,
      t.rope,
      t.rope?.inMatvec,
      t.decodeRows,
      l,
      l?.enabled,
      l?.version,
      l?.params,
      m,
      m?.version,
      m?.copied,
      this.mergeLora,
      this.tensorCores,
      this.fuseDecode,
      this.fuseGateUp,
      this.fuseQkv,
      this.fuseRope,
      this.decodeRows,
      this.q4MatvecRows,
      this.submitLayers, // where a tape submits part-way
    ];
  }

  /** Layer l's attention: its RoPE table and sliding window (undefined: full causal). */
  private attention(l: number): { invFreq: GPUBuffer; window?: number } {
    const c = this.config;
    if (c.layerTypes[l] !== "sliding") return { invFreq: this.invFreq };
    return { invFreq: this.invFreqLocal ?? this.invFreq, window: c.slidingWindow ?? undefined };
  }

  private get useLora(): boolean {
    return !!this.lora && this.lora.enabled && !this.inMerged;
  }

  /**
   * Rows up to which a q4 projection runs as a matvec on the nibbles themselves (the stream variant); above it, and
   * where that variant cannot run it, on an f16 copy (dense). The stream variant reads W once per 4 rows, 0.56 bytes
   * a weight each time, against the copy's 0.56 + 2 written + 2 read per pass of the f16 matvec. On a GPU: start-up
   * tuning's bound (KernelTuning.q4Rows, tuneQ4Rows: one layer's MLP both ways at 1 to 64 rows), 16 untuned; the
   * gpu suite's A/B is `gpu.<model>.q4.decode.b<B>.f16_copy`. 0 on a CPU device.
   */
  q4MatvecRows: number;

  /** Whether Ws (q4, one buffer, of K columns) run as a q4 matvec over N rows: within q4MatvecRows, streamable (K and
   *  the offsets multiples of 32), and with RoPE in its epilogue (`headDim`) where the device binds its 12 buffers. */
  private q4Matvec(N: number, Ws: Matrix[], headDim?: number): boolean {
    const K = Ws[0].cols;
    if (
      N > this.q4MatvecRows ||
      !q4Streamable(
        K,
        Ws.map((W) => W.offset),
      )
    )
      return false;
    return headDim === undefined || (matvecRopeFits(this.gpu, "q4") && matvecRopePairs("stream", "q4", K, headDim) > 0);
  }

  /** Bytes of the f16 copy of the largest q4 product a layer runs (q|k|v or gate|up where they share a buffer, else
   *  the largest matrix), or of Q4_HEAD_ROWS rows of the head. */
  private q4CopyBytes(head: boolean): number {
    const C = this.config.hiddenSize;
    if (head) return q4DequantBytes(Math.min(this.config.vocabSize, Q4_HEAD_ROWS) * C);
    if (this.q4LayerCopy === undefined) {
      const L = this.weights.layers[0];
      const span = (Ws: Matrix[]) =>
        Ws.every((W) => W.buffer === Ws[0].buffer)
          ? Math.max(...Ws.map((W) => W.offset + W.rows * W.cols)) - Math.min(...Ws.map((W) => W.offset))
          : Math.max(...Ws.map((W) => W.rows * W.cols));
      this.q4LayerCopy = q4DequantBytes(
        Math.max(span([L.q, L.k, L.v]), span([L.gate, L.up]), span([L.o]), span([L.down])),
      );
    }
    return this.q4LayerCopy;
  }
  private q4LayerCopy?: number;

  /**
   * Ws (q4, in one buffer) as the f16 matrices every product reads: the span of elements they cover dequantized into
   * a temporary, in `rec` before the products (release `temp` once they are recorded). Each q4 value is exact in f16,
   * so these are the weights the q4 matvec computes with. Other dtypes are returned as they are.
   */
  private dense(rec: Recorder, Ws: Matrix[], head = false): { Ws: Matrix[]; temp?: GPUBuffer } {
    const W0 = Ws[0];
    if (W0.dtype !== "q4") return { Ws };
    if (!Ws.every((W) => W.dtype === "q4" && W.buffer === W0.buffer && W.scales === W0.scales))
      throw new Error("Model: q4 matrices read together must share their buffers");
    const first = Math.min(...Ws.map((W) => W.offset));
    const n = Math.max(...Ws.map((W) => W.offset + W.rows * W.cols)) - first;
    // Every copy of a layer's weights (or of the head's rows) is one size, the largest, so the pool hands each
    // product the same buffer: a captured decode step (Tape) holds one, as the memory plan counts (q4Scratch).
    const bytes = Math.max(q4DequantBytes(n), this.q4CopyBytes(head));
    if (bytes > this.gpu.maxStorageBinding)
      throw new Error(
        `Model: the f16 copy of q4 weights (${Ws.map((W) => `${W.rows}x${W.cols}`).join(", ")}: ${bytes} bytes) ` +
          `exceeds this device's storage binding (${this.gpu.maxStorageBinding} bytes)`,
      );
    const temp = this.gpu.buffer(bytes, "activations", "q4 weights as f16");
    q4Dequant(this.gpu, rec, { q: W0.buffer, s: W0.scales!, out: temp }, { n, first });
    const out = Ws.map((W) => ({
      buffer: temp,
      dtype: "f16" as const,
      rows: W.rows,
      cols: W.cols,
      offset: W.offset - first,
    }));
    return { Ws: out, temp };
  }

  /** Records `f` over the f16 copies of Ws (dense), then releases them. */
  private onCopy(rec: Recorder, Ws: Matrix[], f: (copies: Matrix[]) => void): void {
    const d = this.dense(rec, Ws);
    f(d.Ws);
    this.gpu.release(d.temp);
  }

  /** y (=|+=) x·Wᵀ (+ bias) for x (M, in): matvec for few rows, else the tiled matmul. */
  private linear(
    rec: Recorder,
    x: GPUBuffer,
    W: Matrix,
    y: GPUBuffer,
    M: number,
    bias?: Vector,
    accumulate = false,
  ): void {
    const matvecRows = !accumulate && M <= this.decodeRows;
    if (W.dtype === "q4" && !(matvecRows && this.q4Matvec(M, [W])))
      return this.onCopy(rec, [W], ([D]) => this.linear(rec, x, D, y, M, bias, accumulate));
    if (matvecRows) {
      const o = { wDtype: W.dtype, offsetW: W.offset, offsetBias: bias?.offset, tuning: this.tuning.matvec };
      const b = { x, w: W.buffer, scales: W.scales, y, bias: bias?.buffer };
      matvec(this.gpu, rec, b, { M, N: W.rows, K: W.cols }, o);
      return;
    }
    if (W.dtype === "q4") throw new Error("Model.linear: q4 weights reach a matmul only as their f16 copy");
    const o = { mode: "nt" as const, bDtype: W.dtype, offsetB: W.offset, offsetBias: bias?.offset, accumulate };
    matmul(
      this.gpu,
      rec,
      { a: x, b: W.buffer, c: y, bias: bias?.buffer },
      { M, N: W.rows, K: W.cols },
      { ...o, tuning: this.tuning.matmul, variant: this.tensorCores ? "coop" : undefined },
    );
  }

  /** RMSNorm over rows of n (default C) with the model's eps and tuned layout: y and rstd (for the backward). */
  private rmsnorm(rec: Recorder, b: RmsnormBuffers, rows: number, n = this.config.hiddenSize): void {
    const dims = { rows, C: n, eps: this.config.rmsNormEps };
    rmsnormForward(this.gpu, rec, b, dims, { tuning: this.tuning.rmsnorm });
  }

  /** dx (=|+=) dy·W for dy (M, out): the input gradient of a linear layer. */
  private linearBack(rec: Recorder, dy: GPUBuffer, W: Matrix, dx: GPUBuffer, M: number, accumulate: boolean): void {
    if (W.dtype === "q4") return this.onCopy(rec, [W], ([D]) => this.linearBack(rec, dy, D, dx, M, accumulate));
    const o = { mode: "nn" as const, bDtype: W.dtype, offsetB: W.offset, accumulate, tuning: this.tuning.matmul };
    const scaleA = this.gradScale(rec, dy, M * W.rows);
    const b = { a: dy, b: W.buffer, c: dx, scaleA };
    matmul(this.gpu, rec, b, { M, N: W.cols, K: W.rows }, this.backOptions(o, scaleA));
    this.gpu.release(scaleA);
  }

  /** With tensor cores in backward: max |dy| over its n elements (absMax), for the coop matmul's scaleA. */
  private gradScale(rec: Recorder, dy: GPUBuffer, n: number): GPUBuffer | undefined {
    if (!this.tensorCores || !this.tensorCoresBackward) return undefined;
    const s = this.gpu.buffer(ABSMAX_BYTES, "activations", "gradient scale");
    absMax(this.gpu, rec, dy, s, n);
    return s;
  }

  /** A backward matmul's options: the coop variant where gradScale made a scale. */
  private backOptions<T extends MatmulOptions>(o: T, scaleA: GPUBuffer | undefined): T {
    return scaleA ? { ...o, variant: "coop" } : o;
  }

  /**
   * The LoRA terms y += s·(x·Aᵀ)·Bᵀ of targets that share x (q, k, v; gate, up; or one target), as one group: each
   * adds into its column range of one product (q|k|v, gate|up: `out` as { y (N, ld), offsets }), or into a product
   * of its own (`out` a buffer a target); their t side by side in one buffer, kept for backward when `keep`. x·Aᵀ
   * runs in one dispatch for the group, and so does t·Bᵀ into one product.
   */
  private loraFwdGroup(
    rec: Recorder,
    layer: number,
    targets: LoraTarget[],
    x: GPUBuffer,
    out: { y: GPUBuffer; ld: number; offsets: number[] } | GPUBuffer[],
    N: number,
    keep: boolean,
  ): LoraGroupT | undefined {
    if (!this.useLora) return undefined;
    const l = this.lora!;
    const members: LoraGroupT["members"] = [];
    let ld = 0;
    let inF = 0;
    targets.forEach((target, i) => {
      const slot = l.slot(layer, target);
      if (!slot) return;
      const e = l.byLayer[layer].get(target)!;
      const own = Array.isArray(out) ? { y: out[i], ld: e.out } : undefined;
      const offsetY = Array.isArray(out) ? 0 : out.offsets[i];
      members.push({ target, slot, out: e.out, R: e.rank, scale: e.scale, offsetY, tCol: ld, own });
      ld += e.rank;
      inF = e.in;
    });
    if (!members.length) return undefined;
    const t = this.gpu.buffer(N * ld * 4, "activations", `lora t ${targets.join("|")}`);
    const y = Array.isArray(out) ? { y: out[0], ldy: 0 } : { y: out.y, ldy: out.ld }; // (own outputs: unused)
    loraForwardGroup(this.gpu, rec, { x, t, ldt: ld, ...y }, { N, in: inF }, members, { tuning: this.tuning.lora });
    if (!keep) {
      this.gpu.release(t);
      return undefined;
    }
    return { buf: t, ld, in: inF, members };
  }

  /**
   * Runs the layers over N tokens (ids on the GPU) and returns the final residual stream x (N, C).
   * With `save`, what backward needs is kept: every layer's activations, or with `recompute` only each
   * layer's input (backward runs the layer's forward again from it).
   */
  forward(
    rec: Recorder,
    ids: GPUBuffer,
    N: number,
    attend: Attend,
    save: boolean,
    recompute = false,
  ): { x: GPUBuffer; acts?: Activations } {
    if (!save && this.runsMergedAt(N)) {
      // Inference with the adapter merged into the weights: the same forward on them, without LoRA terms.
      const base = this.weights;
      (this as { weights: GpuWeights }).weights = this.mergedWeights(rec);
      this.inMerged = true;
      try {
        return this.forward(rec, ids, N, attend, false);
      } finally {
        (this as { weights: GpuWeights }).weights = base;
        this.inMerged = false;
      }
    }
    const gpu = this.gpu;
    const c = this.config;
    const C = c.hiddenSize;
    let x = gpu.buffer(N * C * 4, "activations", "x"); // (N, C)
    const E = this.weights.embed;
    if (E.dtype === "q4") {
      q4Gather(gpu, rec, { ids, q: E.nibbles, s: E.scales, out: x }, { N, C, V: E.V, scale: c.embedScale });
    } else embeddingForward(gpu, rec, { W: E, ids, out: x }, { N }, { scale: c.embedScale });
    const layers: (Saved | LayerInput)[] = [];
    for (let l = 0; l < c.numLayers; l++) {
      if (save && !recompute) {
        const r = this.layer(rec, l, x, N, attend, "save");
        layers.push(r.saved!);
        x = r.x;
      } else if (save) {
        // Recompute: keep the layer's input, run the layer on a copy of it.
        layers.push({ x });
        x = this.layer(rec, l, x, N, attend, "copy").x;
      } else if (attend.kind === "cache" && N <= this.decodeRows && this.fuseDecode && this.decodeFusable(l)) {
        x = this.decodeLayer(rec, l, x, N, attend);
      } else {
        x = this.layer(rec, l, x, N, attend, "inplace").x;
      }
      // Buffers this layer released become reusable once its work is submitted.
      const flushes = rec.flushes;
      rec.flushIfPending(FLUSH_BYTES);
      const k = this.submitLayers;
      const due = k > 0 && l < c.numLayers - 1 && (l === 0 || (l + 1) % k === 0);
      if (due && rec.flushes === flushes) rec.submitPart(); // (not again when flushIfPending just submitted)
    }
    if (!save) return { x };
    const hN = gpu.buffer(N * C * 4, "activations", "hN");
    const rstdN = gpu.buffer(N * 4, "activations", "rstdN");
    this.rmsnorm(rec, { x, w: this.weights.finalNorm, y: hN, rstd: rstdN }, N);
    return { x, acts: { N, layers, xL: x, hN, rstdN, slotPos: attend.slotPos, attend } };
  }

  /**
   * One transformer layer on x (N, C). "inplace" (inference) adds both residual branches into x itself and
   * frees its temporaries; "copy" does the same on a new buffer and leaves x untouched; "save" keeps
   * everything backward needs (and x) and returns it.
   */
  private layer(
    rec: Recorder,
    l: number,
    x: GPUBuffer,
    N: number,
    attend: Attend,
    mode: "inplace" | "copy" | "save",
  ): { x: GPUBuffer; saved?: Saved } {
    const gpu = this.gpu;
    const c = this.config;
    const { hiddenSize: C, numHeads: H, numKvHeads: KV, headDim: D, intermediateSize: F } = c;
    const L = this.weights.layers[l];
    const save = mode === "save";
    const buf = (n: number, label: string) => gpu.buffer(n * 4, "activations", label);
    // --- attention block
    const h1 = buf(N * C, "h1");
    const rstd1 = buf(N, "rstd1");
    this.rmsnorm(rec, { x, w: L.inNorm, y: h1, rstd: rstd1 }, N);
    const QKV = this.qkvProduct(l, attend.kind === "cache" || !attend.normGrads);
    const { invFreq, window } = this.attention(l);
    let q: GPUBuffer, k: GPUBuffer | undefined, v: GPUBuffer | undefined;
    let tQkv: LoraGroupT | undefined;
    let qkvPre: GPUBuffer | undefined;
    if (QKV) {
      // One matmul over the three weights, then RoPE and the split in one dispatch (ropeQkv, after the per-head q/k
      // norms where the model has them): q out, and k and v into the KV cache (inference) or into their own
      // buffers, laid out as a cache of B x T (training). Training keeps the product for the norms' backward.
      const ldq = (H + 2 * KV) * D;
      const qkv = buf(N * ldq, "q|k|v");
      this.linear(rec, h1, QKV.W, qkv, N, QKV.bias);
      tQkv = this.loraFwdGroup(
        rec,
        l,
        ["q", "k", "v"],
        h1,
        { y: qkv, ld: ldq, offsets: [0, H * D, (H + KV) * D] },
        N,
        save,
      );
      q = buf(N * H * D, "q");
      const dims = { n: N, h: H, kv: KV, d: D, ldq };
      const norm = c.qkNorm ? { q: L.qNorm!, k: L.kNorm!, eps: c.rmsNormEps } : undefined;
      if (attend.kind === "cache") {
        const kv = attend.kv;
        const b = { qkv, slotPos: attend.slotPos, invFreq, q, kc: kv.k[l], vc: kv.v[l], norm };
        ropeQkv(gpu, rec, b, { ...dims, slots: kv.slots, tmax: kv.tmax }, { tuning: this.tuning.rope });
      } else {
        k = buf(N * KV * D, "k");
        v = buf(N * KV * D, "v");
        const b = { qkv, slotPos: attend.slotPos, invFreq, q, kc: k, vc: v, norm };
        ropeQkv(gpu, rec, b, { ...dims, slots: attend.B, tmax: attend.T }, { tuning: this.tuning.rope });
      }
      if (save && norm) qkvPre = qkv;
      else gpu.release(qkv);
    } else {
      q = buf(N * H * D, "q"); // (N, H*D)
      k = buf(N * KV * D, "k"); // (N, KV*D)
      v = buf(N * KV * D, "v");
      this.linear(rec, h1, L.q, q, N, L.qBias);
      this.linear(rec, h1, L.k, k, N, L.kBias);
      this.linear(rec, h1, L.v, v, N, L.vBias);
      tQkv = this.loraFwdGroup(rec, l, ["q", "k", "v"], h1, [q, k, v], N, save);
    }
    let qPre: GPUBuffer | undefined,
      kPre: GPUBuffer | undefined,
      rstdQ: GPUBuffer | undefined,
      rstdK: GPUBuffer | undefined;
    if (!QKV && c.qkNorm) {
      qPre = q;
      kPre = k;
      q = buf(N * H * D, "qn");
      k = buf(N * KV * D, "kn");
      rstdQ = buf(N * H, "rstdQ");
      rstdK = buf(N * KV, "rstdK");
      this.rmsnorm(rec, { x: qPre, w: L.qNorm!, y: q, rstd: rstdQ }, N * H, D);
      this.rmsnorm(rec, { x: kPre!, w: L.kNorm!, y: k, rstd: rstdK }, N * KV, D);
      if (!save) {
        gpu.release(qPre, kPre, rstdQ, rstdK);
        qPre = kPre = rstdQ = rstdK = undefined;
      }
    }
    if (!QKV) {
      ropeForward(gpu, rec, { x: q, y: q, pos: attend.slotPos, invFreq }, { n: N, heads: H, d: D });
      ropeForward(gpu, rec, { x: k!, y: k!, pos: attend.slotPos, invFreq }, { n: N, heads: KV, d: D });
    }
    const o = buf(N * H * D, "o");
    const lse = buf(N * H, "lse");
    const scale = c.attnScale;
    if (attend.kind === "cache") {
      const kv = attend.kv;
      if (!QKV)
        kvcacheWrite(
          gpu,
          rec,
          { slotPos: attend.slotPos, k: k!, v: v!, kc: kv.k[l], vc: kv.v[l] },
          { n: N, kv: KV, d: D, slots: kv.slots, tmax: kv.tmax },
        );
      const bufs = { q, slotPos: attend.slotPos, k: kv.k[l], v: kv.v[l], o, lse };
      const dims = { n: N, h: H, kv: KV, d: D, slots: kv.slots, tmax: kv.tmax, scale, window };
      if (attend.decode)
        attentionDecode(gpu, rec, bufs, { ...dims, maxLen: attend.maxLen }, { tuning: this.tuning.attention });
      else attentionForward(gpu, rec, bufs, dims, { maxLen: attend.maxLen, tuning: this.tuning.attention });
    } else {
      // Training: token i is (i / T, i % T), so k and v already have the cache layout (B, T, KV, D).
      attentionForward(
        gpu,
        rec,
        { q, slotPos: attend.slotPos, k: k!, v: v!, o, lse },
        { n: N, h: H, kv: KV, d: D, slots: attend.B, tmax: attend.T, scale, window },
        { tuning: this.tuning.attention },
      );
    }
    // Residual: xMid = x + o·Woᵀ (+ LoRA), in place unless x must be kept. Gemma norms the branch first:
    // xMid = x + norm(o·Woᵀ), on a new buffer (the add reads x).
    let xMid = x;
    let ao: GPUBuffer | undefined, rstdA: GPUBuffer | undefined;
    let to: LoraGroupT | undefined;
    if (c.sandwichNorms) {
      ao = buf(N * C, "ao");
      this.linear(rec, o, L.o, ao, N, L.oBias);
      to = this.loraFwdGroup(rec, l, ["o"], o, [ao], N, save);
      rstdA = buf(N, "rstdA");
      xMid = buf(N * C, "xMid");
      this.rmsnorm(rec, { x: ao, w: L.attnOutNorm!, y: xMid, rstd: rstdA, add: x }, N); // x + norm(ao), one pass
      if (mode === "inplace") gpu.release(x);
      if (!save) {
        gpu.release(ao, rstdA);
        ao = rstdA = undefined;
      }
    } else {
      if (mode !== "inplace") {
        xMid = buf(N * C, "xMid");
        rec.copy(x, 0, xMid, 0, N * C * 4);
      }
      this.linear(rec, o, L.o, xMid, N, L.oBias, true);
      to = this.loraFwdGroup(rec, l, ["o"], o, [xMid], N, save);
    }
    // --- MLP block
    const h2 = buf(N * C, "h2");
    const rstd2 = buf(N, "rstd2");
    this.rmsnorm(rec, { x: xMid, w: L.mlpNorm, y: h2, rstd: rstd2 }, N);
    const a = buf(N * F, "a");
    const GU = this.gateUp(l);
    let gate: Saved["gate"];
    let tGateUp: LoraGroupT | undefined;
    if (GU) {
      // One matmul over both weights: gate in columns [0, F) of each row, up in [F, 2F).
      const gu = buf(N * 2 * F, "gate|up");
      this.linear(rec, h2, GU, gu, N);
      tGateUp = this.loraFwdGroup(rec, l, ["gate", "up"], h2, { y: gu, ld: 2 * F, offsets: [0, F] }, N, save);
      swigluForwardPacked(gpu, rec, { gu, h: a }, { N, F }, { act: c.hiddenAct });
      gate = { gu };
    } else {
      const g = buf(N * F, "g");
      const u = buf(N * F, "u");
      this.linear(rec, h2, L.gate, g, N);
      this.linear(rec, h2, L.up, u, N);
      tGateUp = this.loraFwdGroup(rec, l, ["gate", "up"], h2, [g, u], N, save);
      swigluForward(gpu, rec, { g, u, h: a }, { n: N * F }, { act: c.hiddenAct });
      gate = { g, u };
    }
    let xOut = xMid;
    let mo: GPUBuffer | undefined, rstdM: GPUBuffer | undefined;
    let td: LoraGroupT | undefined;
    if (c.sandwichNorms) {
      mo = buf(N * C, "mo");
      this.linear(rec, a, L.down, mo, N);
      td = this.loraFwdGroup(rec, l, ["down"], a, [mo], N, save);
      rstdM = buf(N, "rstdM");
      xOut = buf(N * C, "xOut");
      this.rmsnorm(rec, { x: mo, w: L.mlpOutNorm!, y: xOut, rstd: rstdM, add: xMid }, N);
      if (!save) {
        gpu.release(xMid, mo, rstdM);
        mo = rstdM = undefined;
      }
    } else {
      if (save) {
        xOut = buf(N * C, "xOut");
        rec.copy(xMid, 0, xOut, 0, N * C * 4);
      }
      this.linear(rec, a, L.down, xOut, N, undefined, true);
      td = this.loraFwdGroup(rec, l, ["down"], a, [xOut], N, save);
    }
    if (!save) {
      gpu.release(h1, rstd1, q, k, v, o, lse, h2, rstd2, a, ...Object.values(gate));
      return { x: xOut };
    }
    const saved: Saved = {
      x,
      h1,
      rstd1,
      qkv: qkvPre,
      qPre,
      kPre,
      rstdQ,
      rstdK,
      q,
      k: k!, // saved in training only, where k and v have buffers of their own
      v: v!,
      o,
      lse,
      ao,
      rstdA,
      xMid,
      h2,
      rstd2,
      gate,
      a,
      mo,
      rstdM,
      t: { qkv: tQkv, o: to, gateUp: tGateUp, down: td },
    };
    return { x: xOut, saved };
  }

  /** Whether layer l allows decodeLayer: q, k, v in one buffer (their biases too), gate and up in one, and the
   *  LoRA adapter's buffer (read whole by the matvecs) within one binding. */
  private decodeFusable(l: number): boolean {
    const L = this.weights.layers[l];
    const biases = [L.qBias, L.kBias, L.vBias].filter((b) => b !== undefined);
    return (
      oneBuffer(L.q, L.k, L.v) &&
      oneBuffer(L.gate, L.up) &&
      (biases.length === 0 || (biases.length === 3 && oneBuffer(...biases))) &&
      (!this.useLora || this.lora!.params.size <= this.gpu.maxStorageBinding)
    );
  }

  /** Layer l's q, k and v weights as one matrix of (H + 2 KV) D rows (and their biases as one vector), where they sit
   *  back to back in one buffer, for one matmul and ropeQkv; with per-head q/k norms only where `norms` (they run in
   *  ropeQkv then, whose backward gives no gradient for their weights: off for full fine-tuning); undefined when
   *  fuseQkv is off. */
  private qkvProduct(l: number, norms: boolean): { W: Matrix; bias?: Vector } | undefined {
    if (!this.fuseQkv || (this.config.qkNorm && !norms)) return undefined;
    const L = this.weights.layers[l];
    const next = (a: Matrix, b: Matrix) =>
      a.buffer === b.buffer && a.dtype === b.dtype && a.cols === b.cols && b.offset === a.offset + a.rows * a.cols;
    if (!next(L.q, L.k) || !next(L.k, L.v)) return undefined;
    const W = { ...L.q, rows: L.q.rows + L.k.rows + L.v.rows };
    const [qb, kb, vb] = [L.qBias, L.kBias, L.vBias];
    if (!qb && !kb && !vb) return { W };
    const nextV = (a?: Vector, b?: Vector) => !!a && !!b && a.buffer === b.buffer && b.offset === a.offset + a.length;
    if (!nextV(qb, kb) || !nextV(kb, vb)) return undefined;
    return { W, bias: { ...qb!, length: W.rows } };
  }

  /** Layer l's gate and up weights as one matrix of 2F rows, where they sit back to back in one buffer (the loader
   *  puts them so when each fills whole 256-byte blocks), else undefined. */
  private gateUp(l: number): Matrix | undefined {
    const { gate, up } = this.weights.layers[l];
    const back2back =
      gate.buffer === up.buffer &&
      gate.dtype === up.dtype &&
      gate.cols === up.cols &&
      gate.rows === up.rows &&
      up.offset === gate.offset + gate.rows * gate.cols;
    return this.fuseGateUp && back2back ? { ...gate, rows: 2 * gate.rows } : undefined;
  }

  /** Layer l's LoRA entries for these targets (undefined where the adapter has none, or is off). */
  private loraEntries(l: number, targets: LoraTarget[]): (LoraEntry | undefined)[] {
    return targets.map((t) => (this.useLora ? this.lora!.byLayer[l].get(t) : undefined));
  }

  /**
   * y (=|+=) norm(x)·[W₀; W₁; ...]ᵀ (+ biases) (+ each W's LoRA term), the Ws side by side in one buffer, as one
   * matvec; `gated`: y = act(x·W₀ᵀ)·(x·W₁ᵀ). The LoRA terms' t = norm(x)·Aᵀ of every W come first, in one matvec too.
   */
  private decodeLinear(
    rec: Recorder,
    x: GPUBuffer,
    N: number,
    Ws: Matrix[],
    biases: (Vector | undefined)[],
    entries: (LoraEntry | undefined)[],
    y: GPUBuffer,
    o: {
      norm?: GPUBuffer;
      gated?: ModelConfig["hiddenAct"];
      accumulate?: boolean;
      rope?: { buffers: NonNullable<MatvecBuffers["rope"]>; dims: NonNullable<MatvecOptions["rope"]> };
    },
  ): void {
    if (Ws[0].dtype === "q4" && !this.q4Matvec(N, Ws, o.rope?.dims.headDim))
      return this.onCopy(rec, Ws, (Ds) => this.decodeLinear(rec, x, N, Ds, biases, entries, y, o));
    const gpu = this.gpu;
    const K = Ws[0].cols;
    const norm = o.norm;
    const eps = this.config.rmsNormEps;
    const tuning = this.tuning.matvec;
    const tCol: number[] = [];
    let R = 0;
    for (const e of entries) {
      tCol.push(R);
      R += e?.rank ?? 0;
    }
    let t: GPUBuffer | undefined;
    if (R) {
      t = gpu.buffer(N * R * 4, "activations", "lora t");
      const live = entries.filter((e) => e !== undefined);
      const segments = live.map((e) => ({ rows: e.rank, offsetW: e.a }));
      // A (R, K) is small: workgroups of up to 8 rows each, so many rows spread over more than t's few columns' groups.
      const rowBlocks = Math.ceil(N / 8);
      matvec(
        gpu,
        rec,
        { x, w: this.lora!.params, y: t, norm },
        { M: N, N: R, K },
        { eps, segments, tuning, rowBlocks },
      );
    }
    const segments: MatvecSegment[] = Ws.map((W, i) => {
      const e = entries[i];
      const lora = e && { rank: e.rank, scale: e.scale, b: e.b, tCol: tCol[i] };
      return { rows: W.rows, offsetW: W.offset, offsetBias: biases[i]?.offset, lora };
    });
    matvec(
      gpu,
      rec,
      {
        x,
        w: Ws[0].buffer,
        scales: Ws[0].scales,
        y,
        bias: biases[0]?.buffer,
        norm,
        loraT: t,
        loraParams: t && this.lora!.params,
        rope: o.rope?.buffers,
      },
      { M: N, N: o.gated ? Ws[0].rows : Ws.reduce((a, W) => a + W.rows, 0), K },
      {
        wDtype: Ws[0].dtype,
        eps,
        segments,
        gated: o.gated,
        accumulate: o.accumulate,
        ldt: R,
        tuning,
        rope: o.rope?.dims,
      },
    );
    gpu.release(t);
  }

  /**
   * Inference's layer over at most decodeRows tokens against the KV cache, in place on x: the ops of `layer` with
   * what always runs together in one dispatch. The input norm rides in the q|k|v matvec (one, over the three
   * weights; RoPE and the cache write in its epilogue where fuseRope allows, else with q/k norms in ropeQkv), the
   * residual adds in the o and down matvecs, the MLP
   * norm and the gated activation in the gate|up matvec; each LoRA term in its projection's matvec, after one matvec
   * for the t = x·Aᵀ of all the projections sharing an input.
   */
  private decodeLayer(
    rec: Recorder,
    l: number,
    x: GPUBuffer,
    N: number,
    attend: Attend & { kind: "cache" },
  ): GPUBuffer {
    const gpu = this.gpu;
    const c = this.config;
    const { hiddenSize: C, numHeads: H, numKvHeads: KV, headDim: D, intermediateSize: F } = c;
    const L = this.weights.layers[l];
    const buf = (n: number, label: string) => gpu.buffer(n * 4, "activations", label);
    // --- attention block: q|k|v (N, (H + 2 KV) D) = norm(x)·[Wq; Wk; Wv]ᵀ (+ bias, LoRA), then per-head q/k norms,
    // RoPE, q out and k, v into the cache: in the matvec's epilogue where it can (fuseRope), else ropeQkv.
    const attnIn = this.loraEntries(l, ["q", "k", "v"]);
    const biases = [L.qBias, L.kBias, L.vBias];
    const { invFreq, window } = this.attention(l);
    const kv = attend.kv;
    const q = buf(N * H * D, "q");
    const cache = { slots: kv.slots, tmax: kv.tmax };
    if (this.fuseRope && !c.qkNorm && ropeInMatvec(gpu, this.tuning)) {
      const rope = {
        buffers: { slotPos: attend.slotPos, invFreq, kc: kv.k[l], vc: kv.v[l] },
        dims: { heads: H, kvHeads: KV, headDim: D, ...cache },
      };
      this.decodeLinear(rec, x, N, [L.q, L.k, L.v], biases, attnIn, q, { norm: L.inNorm, rope });
    } else {
      const ldq = (H + 2 * KV) * D;
      const qkv = buf(N * ldq, "qkv");
      this.decodeLinear(rec, x, N, [L.q, L.k, L.v], biases, attnIn, qkv, { norm: L.inNorm });
      const qkNorm = c.qkNorm ? { q: L.qNorm!, k: L.kNorm!, eps: c.rmsNormEps } : undefined;
      ropeQkv(
        gpu,
        rec,
        { qkv, slotPos: attend.slotPos, invFreq, q, kc: kv.k[l], vc: kv.v[l], norm: qkNorm },
        { n: N, h: H, kv: KV, d: D, ldq, ...cache },
        { tuning: this.tuning.rope },
      );
      gpu.release(qkv);
    }
    const o = buf(N * H * D, "o");
    const lse = buf(N * H, "lse");
    const bufs = { q, slotPos: attend.slotPos, k: kv.k[l], v: kv.v[l], o, lse };
    const maxLen = attend.maxLen;
    const dims = { n: N, h: H, kv: KV, d: D, slots: kv.slots, tmax: kv.tmax, scale: c.attnScale, window, maxLen };
    if (attend.decode) attentionDecode(gpu, rec, bufs, dims, { tuning: this.tuning.attention });
    else attentionForward(gpu, rec, bufs, dims, { maxLen, tuning: this.tuning.attention });
    gpu.release(q, lse);
    // Residual: x += o·Woᵀ (+ LoRA); Gemma: x + norm(o·Woᵀ), on a new buffer.
    let xMid = x;
    const oIn = this.loraEntries(l, ["o"]);
    if (c.sandwichNorms) {
      const ao = buf(N * C, "ao");
      this.decodeLinear(rec, o, N, [L.o], [L.oBias], oIn, ao, {});
      xMid = this.addNormed(rec, x, ao, L.attnOutNorm!, N);
      gpu.release(x, ao);
    } else this.decodeLinear(rec, o, N, [L.o], [L.oBias], oIn, x, { accumulate: true });
    gpu.release(o);
    // --- MLP block: a = act(norm(xMid)·Wgᵀ)·(norm(xMid)·Wuᵀ), then xMid += a·Wdᵀ (Gemma: + norm(a·Wdᵀ)).
    const a = buf(N * F, "a");
    const mlpIn = this.loraEntries(l, ["gate", "up"]);
    this.decodeLinear(rec, xMid, N, [L.gate, L.up], [undefined, undefined], mlpIn, a, {
      norm: L.mlpNorm,
      gated: c.hiddenAct,
    });
    let xOut = xMid;
    const downIn = this.loraEntries(l, ["down"]);
    if (c.sandwichNorms) {
      const mo = buf(N * C, "mo");
      this.decodeLinear(rec, a, N, [L.down], [undefined], downIn, mo, {});
      xOut = this.addNormed(rec, xMid, mo, L.mlpOutNorm!, N);
      gpu.release(xMid, mo);
    } else this.decodeLinear(rec, a, N, [L.down], [undefined], downIn, xMid, { accumulate: true });
    gpu.release(a);
    return xOut;
  }

  /** x + norm(b) on a new buffer, in one pass (Gemma's branch outputs reach the residual through their norm). */
  private addNormed(rec: Recorder, x: GPUBuffer, b: GPUBuffer, w: GPUBuffer, N: number): GPUBuffer {
    const C = this.config.hiddenSize;
    const rstd = this.gpu.buffer(N * 4, "activations", "branch rstd");
    const out = this.gpu.buffer(N * C * 4, "activations", "residual");
    this.rmsnorm(rec, { x: b, w, y: out, rstd, add: x }, N);
    this.gpu.release(rstd);
    return out;
  }

  /**
   * Final norm of S selected rows of x (`rows`; none: all N rows in order, S = N), then logits (S, V) through the LM
   * head (row shards). Up to decodeRows rows the norm rides in the head's matvec.
   */
  logits(rec: Recorder, x: GPUBuffer, N: number, rows: GPUBuffer | undefined, S: number, out: GPUBuffer): void {
    const gpu = this.gpu;
    const { hiddenSize: C, vocabSize: V } = this.config;
    if (!rows && S !== N) throw new Error(`logits: ${S} rows of ${N} need their indices`);
    let sel = x;
    if (rows) {
      sel = gpu.buffer(S * C * 4, "activations", "selected rows");
      embeddingForward(gpu, rec, { W: tableViews(gpu, x, N, C, "f32"), ids: rows, out: sel }, { N: S });
    }
    if (S <= this.decodeRows) this.head(rec, sel, S, out, 0, V, V, this.weights.finalNorm);
    else {
      const hs = gpu.buffer(S * C * 4, "activations", "normed rows");
      const rstd = gpu.buffer(S * 4, "activations", "rstd");
      this.rmsnorm(rec, { x: sel, w: this.weights.finalNorm, y: hs, rstd }, S);
      this.head(rec, hs, S, out, 0, V, V);
      gpu.release(hs, rstd);
    }
    if (sel !== x) gpu.release(sel);
  }

  /** Rows v0..v1 of a q4 head as one q4 matrix (its one buffer of nibbles). */
  private headRows(v0: number, v1: number): Matrix {
    const [C, s] = [this.config.hiddenSize, this.weights.head[0]];
    const q4 = { buffer: s.buffer, scales: this.weights.headScales, dtype: "q4" as const };
    return { ...q4, rows: v1 - v0, cols: C, offset: (s.offset ?? 0) + v0 * C };
  }

  /** Rows a..b of head shard `s` (its first row r0) as a matrix the products read: the shard itself at their
   *  offset, or for q4 their f16 copy (release `temp` once the product is recorded). */
  private headShard(rec: Recorder, s: WeightShard, a: number, b: number, r0: number): { W: Matrix; temp?: GPUBuffer } {
    const C = this.config.hiddenSize;
    const W: Matrix = {
      buffer: s.buffer,
      dtype: this.weights.headDtype,
      rows: b - a,
      cols: C,
      offset: (s.offset ?? 0) + (a - r0) * C,
    };
    if (W.dtype !== "q4") return { W };
    const d = this.dense(rec, [{ ...W, scales: this.weights.headScales }], true);
    return { W: d.Ws[0], temp: d.temp };
  }

  /**
   * out[:, 0:(v1-v0)] (row stride ld) = h (M, C) · W_head[v0:v1]ᵀ, walking the head's row shards; with `norm` (up to
   * decodeRows rows), h's rows RMS-normed with that weight first.
   */
  head(
    rec: Recorder,
    h: GPUBuffer,
    M: number,
    out: GPUBuffer,
    v0: number,
    v1: number,
    ld: number,
    norm?: GPUBuffer,
  ): void {
    const C = this.config.hiddenSize;
    if (norm && M > this.decodeRows)
      throw new Error(`head: the norm rides in the matvec only up to ${this.decodeRows} rows`);
    const eps = this.config.rmsNormEps;
    const q4 = this.weights.headDtype === "q4" ? this.headRows(v0, v1) : undefined;
    if (q4 && M <= this.decodeRows && this.q4Matvec(M, [q4])) {
      // Every row at once on the nibbles.
      const b = { x: h, w: q4.buffer, scales: q4.scales, y: out, norm };
      const o = { wDtype: "q4" as const, offsetW: q4.offset, ldy: ld, eps };
      matvec(this.gpu, rec, b, { M, N: v1 - v0, K: C }, o);
      return;
    }
    let r0 = 0;
    for (const s of this.weights.head) {
      const a = Math.max(v0, r0);
      const b = Math.min(v1, r0 + s.rows);
      if (a < b) {
        const { W, temp } = this.headShard(rec, s, a, b, r0);
        const [dt, offW] = [W.dtype as Exclude<Matrix["dtype"], "q4">, W.offset];
        if (M <= this.decodeRows)
          matvec(
            this.gpu,
            rec,
            { x: h, w: W.buffer, y: out, norm },
            { M, N: b - a, K: C },
            {
              wDtype: dt,
              offsetW: offW,
              ldy: ld,
              offsetY: a - v0,
              eps,
              tuning: this.tuning.matvec,
            },
          );
        else
          matmul(
            this.gpu,
            rec,
            { a: h, b: W.buffer, c: out },
            { M, N: b - a, K: C },
            {
              mode: "nt",
              bDtype: dt,
              offsetB: offW,
              ldc: ld,
              offsetC: a - v0,
              tuning: this.tuning.matmul,
              variant: this.tensorCores ? "coop" : undefined,
            },
          );
        this.gpu.release(temp);
      }
      r0 += s.rows;
    }
  }

  /** dh (M, C) += dlogits (M, v1-v0) · W_head[v0:v1]: the LM head's input gradient for one vocab chunk. */
  headBack(rec: Recorder, dlogits: GPUBuffer, M: number, dh: GPUBuffer, v0: number, v1: number): void {
    const C = this.config.hiddenSize;
    // One scale for the chunk's dlogits (M, v1 - v0), whichever shards its columns fall in.
    const scaleA = this.gradScale(rec, dlogits, M * (v1 - v0));
    let r0 = 0;
    for (const s of this.weights.head) {
      const a = Math.max(v0, r0);
      const b = Math.min(v1, r0 + s.rows);
      if (a < b) {
        const { W, temp } = this.headShard(rec, s, a, b, r0);
        matmul(
          this.gpu,
          rec,
          { a: dlogits, b: W.buffer, c: dh, scaleA },
          { M, N: C, K: b - a },
          this.backOptions(
            {
              mode: "nn",
              bDtype: W.dtype as Exclude<Matrix["dtype"], "q4">,
              lda: v1 - v0,
              offsetA: a - v0,
              offsetB: W.offset,
              accumulate: true,
              tuning: this.tuning.matmul,
            },
            scaleA,
          ),
        );
        this.gpu.release(temp);
      }
      r0 += s.rows;
    }
    this.gpu.release(scaleA);
  }

  /**
   * Backward from dhN (N, C), the gradient at the final norm's output, through every layer into the
   * LoRA gradients (accumulated into lora.grads), and the base weights' when `weightGrads` is given (full
   * fine-tuning). Frees the activations as it goes.
   */
  backward(
    rec: Recorder,
    acts: Activations,
    dhN: GPUBuffer,
    attend: { B: number; T: number },
    weightGrads?: WeightGrads,
  ): void {
    const gpu = this.gpu;
    const c = this.config;
    const lora = this.lora;
    const normGrads = acts.attend.kind === "train" && !!acts.attend.normGrads;
    if (weightGrads && this.config.qkNorm && !normGrads)
      throw new Error("Model.backward: full fine-tuning of q/k norms needs the forward's attend.normGrads");
    if (!weightGrads && !lora?.grads)
      throw new Error("backward: nothing to train (no LoRA gradients and no base weight gradients)");
    const { hiddenSize: C, numHeads: H, numKvHeads: KV, headDim: D, intermediateSize: F } = c;
    const { N } = acts;
    const buf = (n: number, label: string) => gpu.buffer(n * 4, "activations", label);
    const w = this.weights;
    // The backward of a group's LoRA terms (loraFwdGroup), from dy: each target's columns of one gradient (N, ld) at
    // its offset, or a gradient a target (the members' `own`, which loraFwdGroup set the same way).
    const loraBackGroup = (
      l: number,
      targets: LoraTarget[],
      g: LoraGroupT | undefined,
      x: GPUBuffer,
      dy: { dy: GPUBuffer; ld: number; offsets: number[] } | GPUBuffer[],
      dx: GPUBuffer,
    ) => {
      targets.forEach((t, i) => {
        const cols = Array.isArray(dy) ? undefined : { lddy: dy.ld, offsetDy: dy.offsets[i] };
        weightGrads?.linear(rec, l, t, x, Array.isArray(dy) ? dy[i] : dy.dy, N, cols);
      });
      if (!lora?.grads || !g) return;
      const members = g.members.map((m) => {
        const i = targets.indexOf(m.target);
        const own = Array.isArray(dy) ? { y: dy[i], ld: m.out } : undefined;
        return { ...m, own, grads: lora.slot(l, m.target, lora.grads)! };
      });
      const d = Array.isArray(dy) ? { dy: dy[0], lddy: 0 } : { dy: dy.dy, lddy: dy.ld }; // (own gradients: unused)
      loraBackwardGroup(gpu, rec, { x, t: g.buf, ldt: g.ld, ...d, dx }, { N, in: g.in }, members, {
        tuning: this.tuning.lora,
      });
    };
    // dx: gradient of the residual stream, carried down through the layers.
    const dx = buf(N * C, "dx");
    const fdw = (name: string, n: number) => (weightGrads ? { dw: weightGrads.norm(name, n) } : {});
    rmsnormBackward(
      gpu,
      rec,
      { x: acts.xL, w: w.finalNorm, rstd: acts.rstdN, dy: dhN, dx, ...fdw(FINAL_NORM, C) },
      { rows: N, C },
      { accumulateDw: true, tuning: this.tuning.rmsnorm },
    );
    gpu.release(acts.hN, acts.rstdN, acts.xL);
    for (let l = c.numLayers - 1; l >= 0; l--) {
      const kept = acts.layers[l];
      // Recompute: the layer's forward again from its input, keeping what backward needs (its output is not).
      let s: Saved;
      if ("h1" in kept) s = kept;
      else {
        const r = this.layer(rec, l, kept.x, N, acts.attend, "save");
        gpu.release(r.x);
        s = r.saved!;
      }
      const L = w.layers[l];
      const norm = (module: string) => layerTensor(l, module);
      // Gemma: a branch output y = norm(b) reaches the residual through its norm; db = norm's backward of dx.
      const branchGrad = (b: GPUBuffer, wn: GPUBuffer, rstd: GPUBuffer, name: string) => {
        const db = buf(N * C, "dbranch");
        rmsnormBackward(
          gpu,
          rec,
          { x: b, w: wn, rstd, dy: dx, dx: db, ...fdw(name, C) },
          { rows: N, C },
          {
            accumulateDw: true,
            tuning: this.tuning.rmsnorm,
          },
        );
        return db;
      };
      // --- MLP block: xOut = xMid + down(a) (Gemma: + norm(down(a))); dx flows to xMid unchanged, plus the branch.
      const dmo = c.sandwichNorms ? branchGrad(s.mo!, L.mlpOutNorm!, s.rstdM!, norm(NORMS.postFeedforward)) : dx;
      const da = buf(N * F, "da");
      this.linearBack(rec, dmo, L.down, da, N, false);
      loraBackGroup(l, ["down"], s.t.down, s.a, [dmo], da);
      const dh2 = buf(N * C, "dh2");
      let dgate: GPUBuffer[];
      if ("gu" in s.gate) {
        // dgu (N, 2F) as gu: one matmul back through both weights, each LoRA term from its half.
        const dgu = buf(N * 2 * F, "dgate|dup");
        swigluBackwardPacked(gpu, rec, { gu: s.gate.gu, dh: da, dgu }, { N, F }, { act: c.hiddenAct });
        this.linearBack(rec, dgu, this.gateUp(l) ?? { ...L.gate, rows: 2 * F }, dh2, N, false);
        loraBackGroup(l, ["gate", "up"], s.t.gateUp, s.h2, { dy: dgu, ld: 2 * F, offsets: [0, F] }, dh2);
        dgate = [dgu];
      } else {
        const dg = buf(N * F, "dg");
        const du = buf(N * F, "du");
        swigluBackward(gpu, rec, { g: s.gate.g, u: s.gate.u, dh: da, dg, du }, { n: N * F }, { act: c.hiddenAct });
        this.linearBack(rec, dg, L.gate, dh2, N, false);
        this.linearBack(rec, du, L.up, dh2, N, true);
        loraBackGroup(l, ["gate", "up"], s.t.gateUp, s.h2, [dg, du], dh2);
        dgate = [dg, du];
      }
      const mlpNorm = norm(c.sandwichNorms ? NORMS.preFeedforward : NORMS.postAttention);
      rmsnormBackward(
        gpu,
        rec,
        { x: s.xMid, w: L.mlpNorm, rstd: s.rstd2, dy: dh2, dx, ...fdw(mlpNorm, C) },
        { rows: N, C },
        {
          accumulate: true,
          accumulateDw: true,
          tuning: this.tuning.rmsnorm,
        },
      );
      gpu.release(da, dh2, ...dgate);
      if (dmo !== dx) gpu.release(dmo);
      // --- attention block: xMid = x + o_proj(o) (Gemma: + norm(o_proj(o))).
      const dao = c.sandwichNorms ? branchGrad(s.ao!, L.attnOutNorm!, s.rstdA!, norm(NORMS.postAttention)) : dx;
      const dO = buf(N * H * D, "do");
      this.linearBack(rec, dao, L.o, dO, N, false);
      loraBackGroup(l, ["o"], s.t.o, s.o, [dao], dO);
      if (dao !== dx) gpu.release(dao);
      const dq = buf(N * H * D, "dq");
      const dk = buf(N * KV * D, "dk");
      const dv = buf(N * KV * D, "dv");
      const { invFreq, window } = this.attention(l);
      attentionBackward(
        gpu,
        rec,
        { q: s.q, k: s.k, v: s.v, o: s.o, lse: s.lse, dout: dO, dq, dk, dv },
        { b: attend.B, t: attend.T, h: H, kv: KV, d: D, scale: c.attnScale, window },
        { tuning: this.tuning.attention },
      );
      const pos = acts.slotPos;
      const dh1 = buf(N * C, "dh1");
      // As the forward ran it: with per-head q/k norms, one product where it kept that product.
      const QKV = c.qkNorm && !s.qkv ? undefined : this.qkvProduct(l, !normGrads);
      if (QKV) {
        // The forward's ropeQkv backwards: dq and dk rotated back, packed with dv as q|k|v was (then the per-head q/k
        // norms' backward on them, in place, from the saved product), then one matmul back through the three
        // weights; each LoRA term reads its columns.
        const ldq = (H + 2 * KV) * D;
        const dqkv = buf(N * ldq, "dq|dk|dv");
        const dims = { n: N, h: H, kv: KV, d: D, ldq };
        ropeBackwardPack(gpu, rec, { dq, dk, dv, slotPos: pos, invFreq, dqkv }, dims);
        gpu.release(dq, dk, dv);
        if (c.qkNorm) {
          const norm = { q: L.qNorm!, k: L.kNorm!, eps: c.rmsNormEps };
          qkNormBackwardPacked(gpu, rec, { qkv: s.qkv!, dqkv, norm }, dims, { tuning: this.tuning.rope });
        }
        this.linearBack(rec, dqkv, QKV.W, dh1, N, false);
        const offsets = [0, H * D, (H + KV) * D];
        loraBackGroup(l, ["q", "k", "v"], s.t.qkv, s.h1, { dy: dqkv, ld: ldq, offsets }, dh1);
        gpu.release(dqkv);
      } else {
        // RoPE is a rotation: its backward rotates the gradient back (in place).
        ropeBackward(gpu, rec, { dy: dq, dx: dq, pos, invFreq }, { n: N, heads: H, d: D });
        ropeBackward(gpu, rec, { dy: dk, dx: dk, pos, invFreq }, { n: N, heads: KV, d: D });
        let dqPre = dq;
        let dkPre = dk;
        if (c.qkNorm) {
          dqPre = buf(N * H * D, "dqPre");
          dkPre = buf(N * KV * D, "dkPre");
          rmsnormBackward(
            gpu,
            rec,
            { x: s.qPre!, w: L.qNorm!, rstd: s.rstdQ!, dy: dq, dx: dqPre, ...fdw(norm(NORMS.q), D) },
            { rows: N * H, C: D },
            { accumulateDw: true, tuning: this.tuning.rmsnorm },
          );
          rmsnormBackward(
            gpu,
            rec,
            { x: s.kPre!, w: L.kNorm!, rstd: s.rstdK!, dy: dk, dx: dkPre, ...fdw(norm(NORMS.k), D) },
            { rows: N * KV, C: D },
            { accumulateDw: true, tuning: this.tuning.rmsnorm },
          );
        }
        this.linearBack(rec, dqPre, L.q, dh1, N, false);
        this.linearBack(rec, dkPre, L.k, dh1, N, true);
        this.linearBack(rec, dv, L.v, dh1, N, true);
        loraBackGroup(l, ["q", "k", "v"], s.t.qkv, s.h1, [dqPre, dkPre, dv], dh1);
        gpu.release(dq, dk, dv);
        if (dqPre !== dq) gpu.release(dqPre, dkPre);
      }
      rmsnormBackward(
        gpu,
        rec,
        { x: s.x, w: L.inNorm, rstd: s.rstd1, dy: dh1, dx, ...fdw(norm(NORMS.input), C) },
        { rows: N, C },
        { accumulate: true, accumulateDw: true, tuning: this.tuning.rmsnorm },
      );
      gpu.release(dO, dh1);
      freeSaved(gpu, s);
      rec.flushIfPending(FLUSH_BYTES);
    }
    weightGrads?.embedding(rec, dx);
    gpu.release(dx);
  }
}

/** Frees a layer's saved set, its input x included (the previous layer's output, or the embedding). */
function freeSaved(gpu: Gpu, s: Saved): void {
  gpu.release(
    s.x,
    s.h1,
    s.rstd1,
    s.qkv,
    s.qPre,
    s.kPre,
    s.rstdQ,
    s.rstdK,
    s.q,
    s.k,
    s.v,
    s.o,
    s.lse,
    s.ao,
    s.rstdA,
    s.xMid,
    s.h2,
    s.rstd2,
    ...Object.values(s.gate),
    s.a,
    s.mo,
    s.rstdM,
    ...Object.values(s.t).map((g) => g?.buf),
  );
}
