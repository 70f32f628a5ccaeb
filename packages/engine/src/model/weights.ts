// Frozen base weights on the GPU: matrices keep their file's 16-bit form (bf16/f16 packed two per u32) or
// f32; norm weights and biases become f32 (Gemma's norm weights stored as w - 1 become 1 + w, so every norm is
// x·rstd·w on the GPU). A layer's q, k, v (and their biases) share one buffer, as do gate and up, each at a 256-byte
// aligned offset, so decode reads them in one dispatch. The embedding (and an untied LM head) are split in row
// shards when they exceed one storage binding. Tensors are streamed one at a time from the reader. With `quantize:
// "q4"` the layers' projections are quantized to 4 bits as they arrive (@webart/shaders quant: nibbles in the group's
// buffer at the same element offsets, their scales in a buffer beside it), and so are the embedding and an untied LM
// head whose rows are whole groups of 32 (one buffer of nibbles each, a Q4Table).
import type { Gpu } from "@webart/gpu";
import {
  Q4_GROUP,
  q4Bytes,
  q4ErrorsInit,
  q4Quantize,
  q4QuantizeError,
  uploadTable,
  type EmbeddingTable,
  type EmbeddingDtype,
  type Q4SourceDtype,
} from "@webart/shaders";
import type { WeightShard } from "@webart/shaders";
import {
  EMBED,
  FINAL_NORM,
  LM_HEAD,
  NORMS,
  PROJECTIONS,
  groupLayout,
  layerTensor,
  tensorShapes,
  weightGroups,
  type ModelConfig,
} from "../config/index.ts";
import { tensorToF32, type Dtype } from "../weights/index.ts";
import type { LoadProgress, Tensor } from "../weights/index.ts";

export type WDtype = "f32" | "bf16" | "f16";
/** A projection's weight dtype: a file's, or q4 (4-bit, quantized at load: EngineOptions.quantize). */
export type MatrixDtype = WDtype | "q4";

export interface Matrix {
  buffer: GPUBuffer;
  dtype: MatrixDtype;
  /** (rows, cols) = (out, in), as nn.Linear. */
  rows: number;
  cols: number;
  /** Element offset of row 0 in `buffer` (16-bit elements when packed, nibbles for q4); a multiple of 256 bytes. */
  offset: number;
  /** q4: the groups' scales (the same element offsets; quant/reference.ts). */
  scales?: GPUBuffer;
}

/** What uploadWeights can do to the checkpoint's matrices on the way. */
export interface UploadOptions {
  /** Every matrix as f32 (e.g. when training the base weights). */
  toF32?: boolean;
  /** The model's matrices as q4 (the embedding and LM head where their rows are whole groups of 32). */
  quantize?: "q4";
  onProgress?: (p: LoadProgress) => void;
}

/** An f32 vector at an element offset of its buffer (a multiple of 256 bytes): a bias. */
export interface Vector {
  buffer: GPUBuffer;
  offset: number;
  length: number;
}

export interface LayerWeights {
  inNorm: GPUBuffer; // (C)
  q: Matrix; // (H*D, C)
  k: Matrix; // (KV*D, C)
  v: Matrix; // (KV*D, C)
  o: Matrix; // (C, H*D)
  qBias?: Vector;
  kBias?: Vector;
  vBias?: Vector;
  oBias?: Vector;
  qNorm?: GPUBuffer; // (D)
  kNorm?: GPUBuffer; // (D)
  /** Gemma: the norm of the attention output before its residual add (its post_attention_layernorm). */
  attnOutNorm?: GPUBuffer; // (C)
  /** The norm before the MLP: post_attention_layernorm (Llama, Qwen, Mistral), pre_feedforward_layernorm (Gemma). */
  mlpNorm: GPUBuffer; // (C)
  /** Gemma: the norm of the MLP output before its residual add (post_feedforward_layernorm). */
  mlpOutNorm?: GPUBuffer; // (C)
  gate: Matrix; // (F, C)
  up: Matrix; // (F, C)
  down: Matrix; // (C, F)
}

/** A q4 table (the embedding, an untied LM head): one buffer of nibbles and one of scales, from element 0. */
export interface Q4Table {
  dtype: "q4";
  V: number;
  C: number;
  nibbles: GPUBuffer;
  scales: GPUBuffer;
}

export interface GpuWeights {
  embed: EmbeddingTable | Q4Table; // (V, C)
  /** The LM head as row shards (the embedding's when tied); a q4 head's shards (Q4_HEAD_ROWS rows each) share one
   *  buffer of nibbles, their scales in headScales. */
  head: WeightShard[];
  headDtype: MatrixDtype;
  headScales?: GPUBuffer;
  layers: LayerWeights[];
  finalNorm: GPUBuffer; // (C)
  bytes: number;
  /** Every buffer uploaded, once each (freeWeights releases them). */
  buffers: GPUBuffer[];
}

/** Whether the matrices (or vectors) sit in one buffer, so that one matvec reads them as segments. */
export function oneBuffer(...xs: { buffer: GPUBuffer }[]): boolean {
  return xs.every((x) => x.buffer === xs[0].buffer);
}

/** A binding of just this matrix or vector (its offset is 256-byte aligned): e.g. for an optimizer step on it. */
export function bindingOf(x: Matrix | Vector): { buffer: GPUBuffer; offset: number; size: number } {
  const f32 = !("dtype" in x) || x.dtype === "f32";
  const n = "dtype" in x ? x.rows * x.cols : x.length;
  return f32
    ? { buffer: x.buffer, offset: x.offset * 4, size: n * 4 }
    : { buffer: x.buffer, offset: x.offset * 2, size: Math.ceil(n / 2) * 4 };
}

/** Whether a table of rows this long (the embedding, the LM head) is q4 under quantize: its rows are whole groups. */
export function q4Rows(cols: number): boolean {
  return cols % Q4_GROUP === 0;
}

/** The most bytes of a tensor a q4 load stages at once: the GPU quantizes it a chunk at a time (q4Quantize). */
export const Q4_STAGE_BYTES = 8 * 2 ** 20;

/** The tensors a q4 load quantizes: every matrix, the embedding and an untied LM head where their rows are whole
 *  groups. */
export function q4Tensors(config: ModelConfig): { name: string; elements: number }[] {
  const out: { name: string; elements: number }[] = [];
  for (const [name, shape] of tensorShapes(config)) {
    if (shape.length !== 2 || ((name === EMBED || name === LM_HEAD) && !q4Rows(shape[1]))) continue;
    out.push({ name, elements: shape[0] * shape[1] });
  }
  return out;
}

/** What a q4 load holds beside the weights while it quantizes: the staging buffer (a chunk of a tensor's own bytes,
 *  f32 at most: Q4_STAGE_BYTES, less where the largest quantized tensor is smaller) and the errors' words (two a
 *  tensor). The memory plan counts both. */
export function q4StagingBytes(config: ModelConfig): { stage: number; errors: number } {
  const ts = q4Tensors(config);
  const largest = Math.max(0, ...ts.map((t) => t.elements));
  return { stage: Math.min(Q4_STAGE_BYTES, Math.ceil(largest / 64) * 64 * 4), errors: 8 * Math.max(1, ts.length) };
}

/** Rows of a q4 LM head a product reads at once where it reads an f16 copy (model.ts head, headBack): its shards'
 *  size, so the copy stays within one vocabulary chunk's rows. */
export const Q4_HEAD_ROWS = 8192;

/** A q4 head as shards of Q4_HEAD_ROWS rows over its one buffer of nibbles. */
function q4HeadShards(t: Q4Table): WeightShard[] {
  const out: WeightShard[] = [];
  for (let r0 = 0; r0 < t.V; r0 += Q4_HEAD_ROWS)
    out.push({ buffer: t.nibbles, rows: Math.min(Q4_HEAD_ROWS, t.V - r0), offset: r0 * t.C });
  return out;
}

/** Returns the weights' buffers to the pool. */
export function freeWeights(gpu: Gpu, w: GpuWeights): void {
  gpu.release(...w.buffers.splice(0));
}

const DT: Record<Dtype, WDtype> = { F32: "f32", BF16: "bf16", F16: "f16" };

function pad4(b: Uint8Array): Uint8Array {
  if (b.byteLength % 4 === 0) return b;
  const p = new Uint8Array(Math.ceil(b.byteLength / 4) * 4);
  p.set(b);
  return p;
}

export function tableShards(t: EmbeddingTable): WeightShard[] {
  return t.shards.map((s) => ({
    buffer: "buffer" in s.binding ? s.binding.buffer : s.binding,
    rows: s.r1 - s.r0,
    offset: s.first,
  }));
}

/** A q4 load's staging buffer and errors (q4StagingBytes), a slot a tensor; `finish` reads the errors, throws the
 *  first tensor's (in the model's order), and gives both buffers back. */
function q4Staging(gpu: Gpu, config: ModelConfig) {
  const ts = q4Tensors(config);
  const b = q4StagingBytes(config);
  const src = gpu.buffer(b.stage, "activations", "q4 staging");
  const errors = gpu.upload(q4ErrorsInit(Math.max(1, ts.length)), "activations", "q4 errors");
  let done = false;
  return {
    src,
    errors,
    bytes: b.stage,
    slots: new Map(ts.map((t, i) => [t.name, i])),
    async finish(): Promise<void> {
      if (done) return;
      done = true;
      try {
        const rec = gpu.recorder();
        const read = rec.read(errors, b.errors);
        await rec.submit();
        const words = new Uint32Array(await read);
        for (let i = 0; i < ts.length; i++) {
          const why = q4QuantizeError(words, i, ts[i].name);
          if (why) throw new Error(why);
        }
      } finally {
        gpu.release(src, errors);
      }
    },
    /** Gives the buffers back without reading (a load that failed otherwise). */
    drop(): void {
      if (!done) gpu.release(src, errors);
      done = true;
    },
  };
}

/** Streams tensors to the GPU; `toF32` forces f32 matrices (e.g. when training the base weights), `quantize` q4
 *  projections. */
export async function uploadWeights(
  gpu: Gpu,
  config: ModelConfig,
  tensors: AsyncIterable<Tensor>,
  opts: UploadOptions = {},
): Promise<GpuWeights> {
  if (opts.toF32 && opts.quantize)
    throw new Error("weights: f32 weights (for full fine-tuning) and quantize q4 exclude each other");
  const buffers: GPUBuffer[] = [];
  const cleanup: { drop?: () => void } = {};
  try {
    return await upload(gpu, config, tensors, opts, buffers, cleanup);
  } catch (e) {
    cleanup.drop?.(); // (q4's staging)
    gpu.release(...buffers); // a failed load keeps nothing on the GPU
    throw e;
  }
}

async function upload(
  gpu: Gpu,
  config: ModelConfig,
  tensors: AsyncIterable<Tensor>,
  opts: UploadOptions,
  buffers: GPUBuffer[],
  cleanup: { drop?: () => void },
): Promise<GpuWeights> {
  const up = (data: ArrayBufferView, name: string) => {
    const b = gpu.upload(data, "weights", name);
    buffers.push(b);
    return b;
  };
  const mats = new Map<string, Matrix>();
  const vecs = new Map<string, GPUBuffer>();
  const biases = new Map<string, Vector>();
  // Grouped tensors go into their group's buffer, made when the group's first tensor arrives (in that tensor's
  // dtype; a member of another dtype, which no known checkpoint has, gets a buffer of its own).
  const shapes = tensorShapes(config);
  const groupOf = new Map<string, { names: string[]; index: number }>();
  for (const names of weightGroups(config)) names.forEach((n, index) => groupOf.set(n, { names, index }));
  const groupBufs = new Map<string[], { buffer?: GPUBuffer; dtype: WDtype; offsets: number[] }>();
  const q4Bufs = new Map<string[], { buffer: GPUBuffer; scales: GPUBuffer; offsets: number[] } | null>();
  // A group's element offsets and span at this element size, and its buffers' label.
  const layoutOf = (names: string[], bytesPerElement: number) => ({
    ...groupLayout(
      names.map((n) => shapes.get(n)!.reduce((a, b) => a * b, 1)),
      bytesPerElement,
    ),
    label: names[0].replace(/\.[a-z_]+\.(weight|bias)$/, ".*"),
  });
  // q4: each tensor quantized on the GPU from its own bytes (q4Quantize), a chunk at a time through one staging
  // buffer; a chunk is written, quantized and submitted before the next is written. The errors (a non-finite weight,
  // one past q4's range) are read once at the end, naming the tensor.
  const q4 = opts.quantize ? q4Staging(gpu, config) : undefined;
  if (q4) cleanup.drop = () => q4.drop();
  const quantizeInto = async (
    name: string,
    t: Tensor,
    nibbles: GPUBuffer,
    scales: GPUBuffer,
    outFirst: number,
  ): Promise<void> => {
    const st = q4!;
    const slot = st.slots.get(name);
    if (slot === undefined) throw new Error(`weights: ${name} is not a tensor this model quantizes`);
    const dtype: Q4SourceDtype = DT[t.dtype];
    const per = dtype === "f32" ? 4 : 2;
    const n = t.bytes.byteLength / per;
    const chunk = Math.floor(st.bytes / per / 64) * 64;
    for (let c0 = 0; c0 < n; c0 += chunk) {
      const m = Math.min(chunk, n - c0);
      gpu.write(st.src, pad4(t.bytes.subarray(c0 * per, (c0 + m) * per)));
      const rec = gpu.recorder();
      q4Quantize(
        gpu,
        rec,
        { src: st.src, nibbles, scales, errors: st.errors },
        { n: m, dtype, outFirst: outFirst + c0, base: c0, slot },
      );
      await rec.submit();
    }
  };
  // q4 projections: the nibbles at the group's element offsets (256-byte aligned: multiples of 512 nibbles), the
  // scales in a buffer beside them at offset / 32; a group past one binding stays apart as above.
  const placeQ4 = async (
    name: string,
    t: Tensor,
  ): Promise<{ buffer: GPUBuffer; offset: number; scales: GPUBuffer }> => {
    const g = groupOf.get(name);
    let gb = g && q4Bufs.get(g.names);
    if (g && gb === undefined) {
      const { offsets, elements, label } = layoutOf(g.names, 0.5);
      const bytes = q4Bytes(elements);
      gb =
        bytes.nibbles <= gpu.maxStorageBinding
          ? {
              buffer: gpu.buffer(bytes.nibbles, "weights", label),
              scales: gpu.buffer(bytes.scales, "weights", label + " scales"),
              offsets,
            }
          : null;
      if (gb) buffers.push(gb.buffer, gb.scales);
      q4Bufs.set(g.names, gb);
    }
    if (!g || !gb) {
      const qb = q4Bytes(t.shape[0] * t.shape[1]);
      const [buffer, scales] = [
        gpu.buffer(qb.nibbles, "weights", name),
        gpu.buffer(qb.scales, "weights", name + " scales"),
      ];
      buffers.push(buffer, scales);
      await quantizeInto(name, t, buffer, scales, 0);
      return { buffer, scales, offset: 0 };
    }
    const offset = gb.offsets[g.index];
    await quantizeInto(name, t, gb.buffer, gb.scales, offset);
    return { buffer: gb.buffer, scales: gb.scales, offset };
  };
  const place = (name: string, dtype: WDtype, data: Uint8Array): { buffer: GPUBuffer; offset: number } => {
    const g = groupOf.get(name);
    if (!g) return { buffer: up(data, name), offset: 0 };
    let gb = groupBufs.get(g.names);
    if (!gb) {
      const { offsets, elements, label } = layoutOf(g.names, dtype === "f32" ? 4 : 2);
      const bytes = dtype === "f32" ? elements * 4 : Math.ceil(elements / 2) * 4;
      // A group past one storage binding stays apart (it is read whole); decode then runs per op.
      const buffer = bytes <= gpu.maxStorageBinding ? gpu.buffer(bytes, "weights", label) : undefined;
      if (buffer) buffers.push(buffer);
      groupBufs.set(g.names, (gb = { buffer, dtype, offsets }));
    }
    if (!gb.buffer || gb.dtype !== dtype) return { buffer: up(data, name), offset: 0 };
    const offset = gb.offsets[g.index];
    gpu.write(gb.buffer, data, offset * (dtype === "f32" ? 4 : 2));
    return { buffer: gb.buffer, offset };
  };
  let embed: EmbeddingTable | Q4Table | undefined;
  let head: EmbeddingTable | Q4Table | undefined;
  let bytes = 0;
  for await (const t of tensors) {
    const name = t.name;
    if (t.shape.length === 1) {
      const f = tensorToF32({ dtype: t.dtype, bytes: t.bytes });
      if (config.normUnitOffset && name.endsWith("norm.weight")) for (let i = 0; i < f.length; i++) f[i] += 1;
      if (name.endsWith(".bias"))
        biases.set(name, { ...place(name, "f32", new Uint8Array(f.buffer)), length: f.length });
      else vecs.set(name, up(f, name));
      bytes += f.byteLength;
      continue;
    }
    let dtype = DT[t.dtype];
    let data: Uint8Array = t.bytes;
    if (opts.toF32 && dtype !== "f32") {
      data = new Uint8Array(tensorToF32({ dtype: t.dtype, bytes: t.bytes }).buffer);
      dtype = "f32";
    }
    const [rows, cols] = t.shape;
    if ((name === EMBED || name === LM_HEAD) && opts.quantize && q4Rows(cols)) {
      // q4 rows of whole groups: the table's nibbles in one binding (a quarter of its 16-bit bytes), gathered by
      // q4Gather and read by the head's products as the projections are.
      const qb = q4Bytes(rows * cols);
      if (qb.nibbles > gpu.maxStorageBinding)
        throw new Error(
          `weights: ${name} as q4 (${qb.nibbles} bytes) exceeds this device's storage binding ` +
            `(${gpu.maxStorageBinding} bytes); load it without quantize`,
        );
      const [nibbles, scales] = [
        gpu.buffer(qb.nibbles, "weights", name),
        gpu.buffer(qb.scales, "weights", name + " scales"),
      ];
      buffers.push(nibbles, scales);
      await quantizeInto(name, t, nibbles, scales, 0);
      const table: Q4Table = { dtype: "q4", V: rows, C: cols, nibbles, scales };
      if (name === LM_HEAD) head = table;
      else embed = table;
      bytes += qb.nibbles + qb.scales;
      continue;
    }
    if (name === EMBED || name === LM_HEAD) {
      const words =
        dtype === "f32"
          ? new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4)
          : new Uint32Array(pad4(data).buffer);
      const table = uploadTable(gpu, words, rows, cols, dtype as EmbeddingDtype);
      for (const sh of tableShards(table)) if (!buffers.includes(sh.buffer)) buffers.push(sh.buffer);
      if (name === LM_HEAD) head = table;
      else embed = table;
    } else if (opts.quantize) {
      const q = await placeQ4(name, t);
      mats.set(name, { ...q, dtype: "q4", rows, cols });
      const qb = q4Bytes(rows * cols);
      bytes += qb.nibbles + qb.scales;
      continue;
    } else {
      mats.set(name, { ...place(name, dtype, pad4(data)), dtype, rows, cols });
    }
    bytes += data.byteLength;
  }
  if (q4) await q4.finish(); // throws a tensor's first error
  if (!embed) throw new Error(`weights: ${EMBED} is missing`);
  const need = <T>(m: Map<string, T>, n: string): T => {
    const v = m.get(n);
    if (!v) throw new Error(`weights: tensor ${n} is missing`);
    return v;
  };
  const layers: LayerWeights[] = [];
  for (let i = 0; i < config.numLayers; i++) {
    const t = (module: string) => layerTensor(i, module);
    const bias = (module: string) => biases.get(layerTensor(i, module, "bias"));
    const P = PROJECTIONS;
    layers.push({
      inNorm: need(vecs, t(NORMS.input)),
      q: need(mats, t(P.q)),
      k: need(mats, t(P.k)),
      v: need(mats, t(P.v)),
      o: need(mats, t(P.o)),
      qBias: bias(P.q),
      kBias: bias(P.k),
      vBias: bias(P.v),
      oBias: bias(P.o),
      qNorm: vecs.get(t(NORMS.q)),
      kNorm: vecs.get(t(NORMS.k)),
      ...(config.sandwichNorms
        ? {
            attnOutNorm: need(vecs, t(NORMS.postAttention)),
            mlpNorm: need(vecs, t(NORMS.preFeedforward)),
            mlpOutNorm: need(vecs, t(NORMS.postFeedforward)),
          }
        : { mlpNorm: need(vecs, t(NORMS.postAttention)) }),
      gate: need(mats, t(P.gate)),
      up: need(mats, t(P.up)),
      down: need(mats, t(P.down)),
    });
  }
  const headTable = config.tieWordEmbeddings ? embed : head;
  if (!headTable) throw new Error(`weights: ${LM_HEAD} is missing and tie_word_embeddings is false`);
  return {
    embed,
    ...(headTable.dtype === "q4"
      ? { head: q4HeadShards(headTable), headScales: headTable.scales }
      : { head: tableShards(headTable) }),
    headDtype: headTable.dtype,
    layers,
    finalNorm: need(vecs, FINAL_NORM),
    bytes,
    buffers,
  };
}
