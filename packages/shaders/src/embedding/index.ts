// Token embedding: out (N, C) = W[ids] with W (V, C) f32 or 16-bit packed, split into shards of rows when
// the table exceeds one storage binding; backward scatter-adds into dW (V, C, f32) without atomics.
import { kernelSpec, Params, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forward from "./forward.wgsl";
import backward from "./backward.wgsl";

const WG = 256;
const DTYPES = { f32: 0, bf16: 1, f16: 2 } as const;
export type EmbeddingDtype = keyof typeof DTYPES;

export const embeddingForwardSpec = (dtype: EmbeddingDtype): KernelSpec =>
  kernelSpec("embedding_forward", forward, { WG, DTYPE: DTYPES[dtype] });
export const embeddingBackwardSpec: KernelSpec = { name: "embedding_backward", code: backward, overrides: { WG } };

/** Rows [r0, r1) of a (V, C) table in one binding; row r0 starts at element `first` of that binding. */
export interface TableShard {
  binding: Binding;
  r0: number;
  r1: number;
  first: number;
}

export interface EmbeddingTable {
  V: number;
  C: number;
  dtype: EmbeddingDtype;
  shards: TableShard[];
}

/** Where each shard lies in the table's flat bytes: binding offset and size, both multiples of 4. */
export interface ShardRange {
  r0: number;
  r1: number;
  offset: number;
  size: number;
  first: number;
}

const bytesPer = (dtype: EmbeddingDtype): number => (dtype === "f32" ? 4 : 2);

/**
 * Splits a (V, C) table into row ranges whose bindings hold at most `maxBytes` and start at a multiple
 * of `align` bytes (a 16-bit row may then start mid-word: `first` says where).
 */
export function splitRows(V: number, C: number, dtype: EmbeddingDtype, maxBytes: number, align = 4): ShardRange[] {
  const bpe = bytesPer(dtype);
  const end = (r: number) => Math.ceil((r * C * bpe) / 4) * 4; // byte just past row r - 1, word-rounded
  const out: ShardRange[] = [];
  for (let r0 = 0; r0 < V;) {
    const offset = Math.floor((Math.floor((r0 * C * bpe) / 4) * 4) / align) * align;
    const r1 = Math.min(V, Math.floor((Math.floor((offset + maxBytes) / 4) * 4) / (C * bpe)));
    if (r1 <= r0) {
      throw new Error(`embedding: a row of ${C} ${dtype} values does not fit a ${maxBytes}-byte storage binding`);
    }
    out.push({ r0, r1, offset, size: end(r1) - offset, first: r0 * C - offset / bpe });
    r0 = r1;
  }
  return out;
}

/** A table held in one buffer (up to maxBufferSize), bound in windows of at most maxBytes. */
export function tableViews(
  gpu: Gpu,
  buffer: GPUBuffer,
  V: number,
  C: number,
  dtype: EmbeddingDtype,
  maxBytes = gpu.maxStorageBinding,
): EmbeddingTable {
  const ranges = splitRows(V, C, dtype, maxBytes, gpu.limits.minStorageBufferOffsetAlignment);
  const last = ranges[ranges.length - 1];
  if (last && last.offset + last.size > buffer.size) {
    throw new Error(`embedding: buffer of ${buffer.size} bytes is too small for a (${V}, ${C}) ${dtype} table`);
  }
  const shards = ranges.map(({ r0, r1, offset, size, first }) => ({
    binding: { buffer, offset, size },
    r0,
    r1,
    first,
  }));
  return { V, C, dtype, shards };
}

/**
 * Uploads a (V, C) table, one buffer per shard of at most maxBytes: `data` is the f32 values (dtype f32)
 * or the packed 16-bit words (see util/half.ts packHalf).
 */
export function uploadTable(
  gpu: Gpu,
  data: Float32Array | Uint32Array,
  V: number,
  C: number,
  dtype: EmbeddingDtype,
  maxBytes = gpu.maxStorageBinding,
  tag = "weights",
): EmbeddingTable {
  const need = dtype === "f32" ? V * C : Math.ceil((V * C) / 2);
  if (data.length < need) throw new Error(`embedding: table data has ${data.length} words, needs ${need}`);
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const shards = splitRows(V, C, dtype, maxBytes).map(({ r0, r1, offset, size, first }) => ({
    binding: gpu.upload(bytes.subarray(offset, offset + size), tag, `embedding rows ${r0}..${r1}`),
    r0,
    r1,
    first,
  }));
  return { V, C, dtype, shards };
}

/** A table of one zero-filled buffer per shard (e.g. dW for a vocabulary too big for one buffer). */
export function allocTable(
  gpu: Gpu,
  rec: Recorder,
  V: number,
  C: number,
  dtype: EmbeddingDtype = "f32",
  maxBytes = gpu.maxStorageBinding,
  tag = "gradients",
): EmbeddingTable {
  const shards = splitRows(V, C, dtype, maxBytes).map(({ r0, r1, size, first }) => {
    const binding = gpu.buffer(size, tag, `embedding rows ${r0}..${r1}`);
    rec.clear(binding); // pooled buffers hold old data
    return { binding, r0, r1, first };
  });
  return { V, C, dtype, shards };
}

/** Releases the buffers uploadTable / allocTable made (views of a caller's buffer are left alone). */
export function releaseTable(gpu: Gpu, t: EmbeddingTable): void {
  gpu.release(...t.shards.map((s) => ("buffer" in s.binding ? undefined : s.binding)));
}

function bindingSize(b: Binding): number {
  return "buffer" in b ? (b.size ?? b.buffer.size - (b.offset ?? 0)) : b.size;
}

const shardBytes = (s: TableShard, C: number, dtype: EmbeddingDtype): number =>
  Math.ceil(((s.first + (s.r1 - s.r0) * C) * bytesPer(dtype)) / 4) * 4;

/** Shards must tile rows [0, V) in order, each binding long enough for its rows. */
function checkShards(t: EmbeddingTable): void {
  let next = 0;
  for (const s of t.shards) {
    if (s.r0 !== next || s.r1 <= s.r0 || bindingSize(s.binding) < shardBytes(s, t.C, t.dtype)) {
      throw new Error(
        `embedding: shard rows [${s.r0}, ${s.r1}) does not continue at row ${next} or its binding is short`,
      );
    }
    next = s.r1;
  }
  if (next !== t.V) throw new Error(`embedding: shards cover rows [0, ${next}) of V = ${t.V}`);
}

export interface EmbeddingBuffers {
  W: EmbeddingTable; // (V, C) in row shards
  ids: Binding; // (N) u32
  out: Binding; // (N, C) out
}

export interface EmbeddingOptions {
  /** Factor on every row read (Gemma: sqrt(C)); default 1. */
  scale?: number;
}

/** out (N, C) = W[ids] * scale: one dispatch per shard. ids (N) u32 on the GPU; ids >= V leave their row unwritten. */
export function embeddingForward(
  gpu: Gpu,
  rec: Recorder,
  { W, ids, out }: EmbeddingBuffers,
  { N }: { N: number },
  { scale = 1 }: EmbeddingOptions = {},
): void {
  checkShards(W);
  for (const shard of W.shards) embeddingShard(gpu, rec, { shard, ids, out }, { N, C: W.C, dtype: W.dtype }, { scale });
}

export interface EmbeddingShardBuffers {
  shard: TableShard; // rows [r0, r1) of a (V, C) table
  ids: Binding; // (N) u32
  out: Binding; // (N, C) out
}

export interface EmbeddingShardDims {
  N: number;
  C: number;
  /** The type of the shard's values. */
  dtype: EmbeddingDtype;
}

/** out[n, :] = W[ids[n], :] * scale for the tokens whose id is in the shard's rows [r0, r1); other rows untouched. */
export function embeddingShard(
  gpu: Gpu,
  rec: Recorder,
  { shard, ids, out }: EmbeddingShardBuffers,
  { N, C, dtype }: EmbeddingShardDims,
  { scale = 1 }: EmbeddingOptions = {},
): void {
  if (N === 0) return;
  if (N * C > 0xffffffff) throw new Error(`embedding: N * C = ${N * C} exceeds the u32 index range`);
  if (bindingSize(ids) < N * 4 || bindingSize(out) < N * C * 4) {
    throw new Error(`embedding: ids or out buffer too small for N = ${N}, C = ${C}`);
  }
  if (bindingSize(shard.binding) < shardBytes(shard, C, dtype)) {
    throw new Error(`embedding: binding of shard rows [${shard.r0}, ${shard.r1}) is too small`);
  }
  const colGroups = Math.ceil(C / (WG * 4));
  const params = new Params().u32(N, C, shard.r0, shard.r1, shard.first, colGroups).f32(scale);
  rec.dispatch(embeddingForwardSpec(dtype), [ids, shard.binding, out], gpu.grid(N * colGroups), params);
}

/** Unique ids in increasing order, and for each the tokens that hold it in increasing order (CSR). */
export function tokensById(
  ids: ArrayLike<number>,
  V: number,
): { uniq: Uint32Array; starts: Uint32Array; tokens: Uint32Array } {
  const N = ids.length;
  for (let n = 0; n < N; n++) {
    if (!(ids[n] >= 0 && ids[n] < V && Number.isInteger(ids[n])))
      throw new Error(`embedding: ids[${n}] = ${ids[n]} is not in [0, ${V})`);
  }
  const tokens = Uint32Array.from({ length: N }, (_, n) => n).sort((a, b) => ids[a] - ids[b] || a - b);
  const uniq: number[] = [];
  const starts: number[] = [];
  for (let j = 0; j < N; j++) {
    if (j === 0 || ids[tokens[j]] !== ids[tokens[j - 1]]) {
      uniq.push(ids[tokens[j]]);
      starts.push(j);
    }
  }
  starts.push(N);
  return { uniq: Uint32Array.from(uniq), starts: Uint32Array.from(starts), tokens };
}

export interface EmbeddingBackwardBuffers {
  dout: Binding; // (N, C)
  dW: EmbeddingTable; // (V, C) f32, accumulated into
}

export interface EmbeddingBackwardDims {
  /** (N) the forward's token ids, on the CPU (they say which rows each dispatch adds into, so N = ids.length). */
  ids: ArrayLike<number>;
}

/**
 * dW (V, C) += scatter-add of dout (N, C) by `ids` (the same ids as the forward, on the CPU). dW is an f32
 * table (one buffer: tableViews; or shards); it is accumulated into, so clear it first if nothing is there.
 */
export function embeddingBackward(
  gpu: Gpu,
  rec: Recorder,
  { dout, dW }: EmbeddingBackwardBuffers,
  { ids }: EmbeddingBackwardDims,
): void {
  const { C, V } = dW;
  const N = ids.length;
  if (N === 0) return;
  if (dW.dtype !== "f32") throw new Error(`embedding: dW must be f32, got ${dW.dtype}`);
  if (bindingSize(dout) < N * C * 4) throw new Error(`embedding: dout is too small for N = ${N}, C = ${C}`);
  checkShards(dW);
  const { uniq, starts, tokens } = tokensById(ids, V);
  const K = uniq.length;
  const csr = new Uint32Array(2 * K + 1 + N);
  csr.set(uniq, 0);
  csr.set(starts, K);
  csr.set(tokens, 2 * K + 1);
  const bcsr = gpu.upload(csr, "activations", "embedding backward csr");
  const colGroups = Math.ceil(C / WG);
  let k0 = 0;
  for (const s of dW.shards) {
    let k1 = k0;
    while (k1 < K && uniq[k1] < s.r1) k1++;
    if (k1 > k0) {
      const params = new Params().u32(C, K, k0, k1, s.r0, s.first, colGroups);
      rec.dispatch(embeddingBackwardSpec, [bcsr, dout, s.binding], gpu.grid((k1 - k0) * colGroups), params);
    }
    k0 = k1;
  }
  gpu.release(bcsr); // the pool keeps it until this recorder is submitted
}
