// RoPE: inverse frequencies on the CPU (HF default, linear and Llama-3 scaling, so the scaling logic stays in TS) and the
// dispatches of the rotation (forward) and its inverse (backward) on (N, heads, D) rows, in place or not; and
// inference's attention inputs in one dispatch (ropeQkv: per-head q/k norm, RoPE, q out, k and v into the KV cache).
import { isCpuDevice, Params, sizeOf, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import cosSin from "./cossin.wgsl";
import normBackward from "./norm_backward.wgsl";
import rotate from "./rotate.wgsl";

/** The rotations, with cosSin (which the matvec that fuses RoPE shares: matvec/rope.wgsl). */
const code = rotate + cosSin;

const WG = 256;
const spec = (name: string): KernelSpec => ({ name, code, overrides: { WG } });
export const ropeForwardSpec = spec("rope_forward");
export const ropeForwardInplaceSpec = spec("rope_forward_inplace");
export const ropeBackwardSpec = spec("rope_backward");
export const ropeBackwardInplaceSpec = spec("rope_backward_inplace");
/** ropeQkv's layouts. "cpu": one thread a head row, in workgroups of 64 so that a decode batch's few rows still
 * spread over workgroups (SwiftShader's threads); "gpu": a workgroup of 64 a head row, each thread a few of its
 * pairs, so a decode step's rotations run side by side instead of D/2 after another in each of a few threads. */
export const ROPE_QKV_LAYOUTS = ["cpu", "gpu"] as const;
export type RopeQkvLayout = (typeof ROPE_QKV_LAYOUTS)[number];
/** What start-up tuning (tune/kernels.ts) chooses for ropeQkv. */
export interface RopeTuning {
  /** For up to `layoutRows` tokens (decode). */
  layout: RopeQkvLayout;
  /** The rows `layout` was measured at: steps of more tokens run prefillLayout (default DECODE_LAYOUT_ROWS). */
  layoutRows?: number;
  /** For more tokens (prefill, training, a rollout's steps that prefill a prompt), measured on a problem of that
   *  size: on SwiftShader the layouts' order flips between the two (tuned at 8 rows, "gpu" took 23-28% of a
   *  tic-tac-toe rollout's GPU time, "cpu" 2%). Unset: `layout`. */
  prefillLayout?: RopeQkvLayout;
  /** Decode's RoPE in the q|k|v matvec's epilogue (matvec options.rope) rather than in ropeQkv after it: measured
   *  where the model has no q/k norms and the device binds the matvec's buffers; unset: not measured. */
  inMatvec?: boolean;
}
export const ropeQkvSpecs: Record<RopeQkvLayout, KernelSpec> = {
  cpu: { name: "rope_qkv", code, overrides: { WG: 64 } },
  gpu: { name: "rope_qkv_wide", code, overrides: { WG: 64 } },
};

/** The most tokens for which ropeQkv runs RopeTuning.layout when its layoutRows is not given. */
export const DECODE_LAYOUT_ROWS = 64;

/** ropeQkv's layout for `n` tokens: as chosen, else tuned (for decode, or above layoutRows tokens for prefill), else
 *  by the device's kind. */
export function ropeQkvLayout(gpu: Gpu, opts: RopeQkvOptions = {}, n = 1): RopeQkvLayout {
  const t = opts.tuning;
  const tuned = n > (t?.layoutRows ?? DECODE_LAYOUT_ROWS) ? (t?.prefillLayout ?? t?.layout) : t?.layout;
  return opts.layout ?? tuned ?? (isCpuDevice(gpu) ? "cpu" : "gpu");
}

export interface RopeQkvOptions {
  /** The layout (default: the tuned one, else by the device's kind). */
  layout?: RopeQkvLayout;
  tuning?: RopeTuning;
}

/** Llama-3 frequency scaling, HF `rope_scaling` with `rope_type: "llama3"`. */
export interface Llama3RopeScaling {
  type: "llama3";
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}
/** Linear (position interpolation) scaling, HF `rope_type: "linear"` (Gemma 3's global layers): every frequency / factor. */
export interface LinearRopeScaling {
  type: "linear";
  factor: number;
}
export type RopeScaling = Llama3RopeScaling | LinearRopeScaling;

/**
 * Inverse frequencies (D/2) = theta^(-2i/D), with linear scaling (all divided by `factor`, HF
 * `_compute_linear_scaling_rope_parameters`) or Llama-3 scaling as HF `_compute_llama3_parameters`: wavelengths
 * longer than original_max / low_freq_factor are slowed by `factor`, shorter than original_max / high_freq_factor
 * kept, and the band between interpolated smoothly.
 */
export function ropeInvFreq(d: number, theta: number, scaling?: RopeScaling): Float32Array {
  if (d % 2 !== 0 || d <= 0) throw new Error(`rope: head dim ${d} must be even and positive`);
  const out = new Float32Array(d / 2);
  for (let i = 0; i < d / 2; i++) {
    const f = 1 / theta ** ((2 * i) / d);
    out[i] = !scaling ? f : scaling.type === "linear" ? f / scaling.factor : llama3(f, scaling);
  }
  return out;
}

function llama3(f: number, s: Llama3RopeScaling): number {
  const wavelen = (2 * Math.PI) / f;
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  if (wavelen < highWavelen) return f;
  if (wavelen > lowWavelen) return f / s.factor;
  const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
  return (1 - smooth) * (f / s.factor) + smooth * f;
}

export interface RopeDims {
  /** N tokens. */
  n: number;
  heads: number;
  /** D head dim (even). */
  d: number;
  /** u32 words per token in `pos`: 2 for the (slot, pos) buffer (default), 1 for a plain position array. */
  posStride?: 1 | 2;
}

function record(
  gpu: Gpu,
  rec: Recorder,
  x: GPUBuffer,
  y: GPUBuffer,
  pos: GPUBuffer,
  invFreq: GPUBuffer,
  dims: RopeDims,
  backward: boolean,
): void {
  const { n, heads, d, posStride = 2 } = dims;
  if (d % 2 !== 0) throw new Error(`rope: head dim ${d} must be even`);
  const inplace = x === y;
  const s = [
    [ropeForwardSpec, ropeForwardInplaceSpec],
    [ropeBackwardSpec, ropeBackwardInplaceSpec],
  ][+backward][+inplace];
  const params = new Params().u32(n * heads, heads, d / 2, posStride);
  rec.dispatch(
    s,
    inplace ? [pos, invFreq, y] : [pos, invFreq, y, x],
    gpu.grid(Math.ceil((n * heads * d) / 2 / WG)),
    params,
  );
}

export interface RopeForwardBuffers {
  x: GPUBuffer; // (N, heads, D)
  y: GPUBuffer; // (N, heads, D) out; may be x (in place)
  pos: GPUBuffer; // (N, posStride) u32
  invFreq: GPUBuffer; // (D/2)
}

/** y = rope(x) on (N, heads, D) rows; pass y === x to rotate in place. `pos` holds each token's position. */
export function ropeForward(gpu: Gpu, rec: Recorder, b: RopeForwardBuffers, dims: RopeDims): void {
  record(gpu, rec, b.x, b.y, b.pos, b.invFreq, dims, false);
}

export interface RopeBackwardBuffers {
  dy: GPUBuffer; // (N, heads, D)
  dx: GPUBuffer; // (N, heads, D) out; may be dy (in place)
  pos: GPUBuffer; // (N, posStride) u32
  invFreq: GPUBuffer; // (D/2)
}

/** dx = rope(dy) by the negative angle (the transpose of the rotation); dx === dy works in place. */
export function ropeBackward(gpu: Gpu, rec: Recorder, b: RopeBackwardBuffers, dims: RopeDims): void {
  record(gpu, rec, b.dy, b.dx, b.pos, b.invFreq, dims, true);
}

export interface RopeQkvDims {
  /** N tokens. */
  n: number;
  h: number;
  kv: number;
  /** D head dim (even). */
  d: number;
  /** Elements per token in `qkv` (at least (H + 2 KV) D). */
  ldq: number;
  /** S slots and Tmax rows per slot of the cache. */
  slots: number;
  tmax: number;
}

export interface RopeQkvBuffers {
  /** (N, ldq): each token's H q heads, KV k heads and KV v heads of D, side by side. */
  qkv: GPUBuffer;
  slotPos: GPUBuffer; // (N, 2) u32
  invFreq: GPUBuffer; // (D/2)
  q: GPUBuffer; // (N, H, D) out
  kc: GPUBuffer; // (S, Tmax, KV, D)
  vc: GPUBuffer; // (S, Tmax, KV, D)
  /** Per-head RMSNorm of q and k before RoPE (Qwen3's and Gemma 3's q_norm, k_norm): weights (D) and eps. */
  norm?: { q: GPUBuffer; k: GPUBuffer; eps: number };
}

/**
 * q = rope(norm(q)) written out, k = rope(norm(k)) and v written into the caches at each token's (slot, pos);
 * tokens with a slot or pos out of range get q only. What ropeForward on q and k and kvcacheWrite do, in one dispatch.
 */
export function ropeQkv(
  gpu: Gpu,
  rec: Recorder,
  b: RopeQkvBuffers,
  dims: RopeQkvDims,
  opts: RopeQkvOptions = {},
): RopeQkvLayout {
  const { n, h, kv, d, ldq, slots, tmax } = dims;
  if (d % 2 !== 0 || h % kv !== 0)
    throw new Error(`ropeQkv: need an even head dim and H % KV == 0 (D=${d} H=${h} KV=${kv})`);
  if (ldq < (h + 2 * kv) * d) throw new Error(`ropeQkv: ldq ${ldq} is less than (H + 2 KV) D = ${(h + 2 * kv) * d}`);
  if (slots * tmax * kv * d >= 2 ** 32)
    throw new Error(`ropeQkv: ${slots}x${tmax}x${kv}x${d} elements overflow u32 indexing`);
  const need = (what: string, buf: GPUBuffer, elements: number) => needFloats("ropeQkv", what, buf, elements);
  need("qkv", b.qkv, (n - 1) * ldq + (h + 2 * kv) * d);
  need("slotPos", b.slotPos, 2 * n);
  need("invFreq", b.invFreq, d / 2);
  need("q", b.q, n * h * d);
  need("k cache", b.kc, slots * tmax * kv * d);
  need("v cache", b.vc, slots * tmax * kv * d);
  if (b.norm) {
    need("q norm", b.norm.q, d);
    need("k norm", b.norm.k, d);
  }
  const params = new Params().u32(n, h, kv, d, ldq, slots, tmax, b.norm ? 1 : 0).f32(b.norm?.eps ?? 0);
  const layout = ropeQkvLayout(gpu, opts, n);
  if (!(layout in ropeQkvSpecs)) throw new Error(`ropeQkv: layout "${layout}" (${ROPE_QKV_LAYOUTS.join(", ")})`);
  const rows = n * (h + 2 * kv);
  if (!rows) return layout;
  const bindings = [b.slotPos, b.invFreq, b.q, b.qkv, b.norm?.q ?? b.qkv, b.norm?.k ?? b.qkv, b.kc, b.vc];
  const spec = ropeQkvSpecs[layout];
  rec.dispatch(spec, bindings, gpu.grid(layout === "gpu" ? rows : Math.ceil(rows / 64)), params);
  return layout;
}

const packSpec: KernelSpec = { name: "rope_backward_pack", code, overrides: { WG } };

export interface RopeBackwardPackBuffers {
  dq: GPUBuffer; // (N, H, D), the gradient at RoPE's output
  dk: GPUBuffer; // (N, KV, D)
  dv: GPUBuffer; // (N, KV, D)
  slotPos: GPUBuffer; // (N, 2) u32: each token's position is its second word
  invFreq: GPUBuffer; // (D/2)
  /** (N, ldq) out: rows of rope⁻¹(dq) | rope⁻¹(dk) | dv, as ropeQkv's qkv holds q, k and v. */
  dqkv: GPUBuffer;
}

/** The backward of ropeQkv's RoPE on a packed q|k|v product (without q/k norms): dq and dk rotated back and dv, packed
 *  into the rows of dqkv, so one matmul takes the gradient back through the three weights. */
export function ropeBackwardPack(
  gpu: Gpu,
  rec: Recorder,
  b: RopeBackwardPackBuffers,
  dims: { n: number; h: number; kv: number; d: number; ldq: number },
): void {
  const { n, h, kv, d, ldq } = dims;
  if (d % 2 !== 0 || ldq < (h + 2 * kv) * d)
    throw new Error(`ropeBackwardPack: need an even head dim and ldq >= (H + 2 KV) D (D=${d} ldq=${ldq})`);
  const need = (what: string, buf: GPUBuffer, elements: number) => needFloats("ropeBackwardPack", what, buf, elements);
  need("dq", b.dq, n * h * d);
  need("dk", b.dk, n * kv * d);
  need("dv", b.dv, n * kv * d);
  need("slotPos", b.slotPos, 2 * n);
  need("invFreq", b.invFreq, d / 2);
  need("dqkv", b.dqkv, (n - 1) * ldq + (h + 2 * kv) * d);
  const params = new Params().u32(n, h, kv, d, ldq, 0, 0, 0).f32(0);
  const threads = n * (h + 2 * kv) * (d / 2);
  if (!threads) return;
  rec.dispatch(packSpec, [b.slotPos, b.invFreq, b.dqkv, b.dq, b.dk, b.dv], gpu.grid(Math.ceil(threads / WG)), params);
}

/** Throws unless `buf` holds `elements` floats, naming the op and the buffer. */
function needFloats(op: string, what: string, buf: GPUBuffer, elements: number): void {
  if (sizeOf(buf) < elements * 4) throw new Error(`${op}: ${what} holds ${buf.size} bytes, needs ${elements * 4}`);
}

/** qkNormBackwardPacked's threads a head row by ropeQkv's layouts: one ("cpu"), or 64 ("gpu"), in workgroups of 64. */
const NORM_BACK_WG = 64;
const normBackTpr: Record<RopeQkvLayout, number> = { cpu: 1, gpu: 64 };
const normBackSpec = (layout: RopeQkvLayout): KernelSpec => ({
  name: "qk_norm_backward_packed",
  code: normBackward,
  overrides: { WG: NORM_BACK_WG, TPR: normBackTpr[layout] },
});
const normBackSpecs: Record<RopeQkvLayout, KernelSpec> = { cpu: normBackSpec("cpu"), gpu: normBackSpec("gpu") };

export interface QkNormBackwardPackedBuffers {
  /** (N, ldq) the forward's q|k|v product, before the per-head norms (ropeQkv's qkv input). */
  qkv: GPUBuffer;
  /** (N, ldq) in and out: its q and k heads, the gradient at the norms' output (ropeBackwardPack's dqkv), become the
   *  gradient at their input; its v heads are left as they are. */
  dqkv: GPUBuffer;
  /** The per-head norms' weights (D each), and eps. */
  norm: { q: GPUBuffer; k: GPUBuffer; eps: number };
}

/**
 * The backward of ropeQkv's per-head q/k RMSNorm (Qwen3, Gemma 3) on packed rows, in place, for training's one
 * matmul back through q|k|v: after ropeBackwardPack has rotated dq and dk back into dqkv, each q and k head row
 * becomes dx = rs (w dy - x rs² mean(w dy x)), rs recomputed from the saved product. The norms' own weight gradients
 * are not computed (full fine-tuning runs the norms apart). The layout is ropeQkv's for as many tokens.
 */
export function qkNormBackwardPacked(
  gpu: Gpu,
  rec: Recorder,
  b: QkNormBackwardPackedBuffers,
  dims: { n: number; h: number; kv: number; d: number; ldq: number },
  opts: RopeQkvOptions = {},
): RopeQkvLayout {
  const { n, h, kv, d, ldq } = dims;
  if (ldq < (h + 2 * kv) * d)
    throw new Error(`qkNormBackwardPacked: ldq ${ldq} is less than (H + 2 KV) D = ${(h + 2 * kv) * d}`);
  const need = (what: string, buf: GPUBuffer, elements: number) =>
    needFloats("qkNormBackwardPacked", what, buf, elements);
  const packed = (n - 1) * ldq + (h + 2 * kv) * d;
  need("qkv", b.qkv, packed);
  need("dqkv", b.dqkv, packed);
  need("q norm", b.norm.q, d);
  need("k norm", b.norm.k, d);
  const layout = ropeQkvLayout(gpu, opts, n);
  const spec = normBackSpecs[layout];
  if (!spec) throw new Error(`qkNormBackwardPacked: layout "${layout}" (${ROPE_QKV_LAYOUTS.join(", ")})`);
  const rows = n * (h + kv);
  if (!rows) return layout;
  const perGroup = NORM_BACK_WG / normBackTpr[layout];
  const params = new Params().u32(n, h, kv, d, ldq).f32(b.norm.eps);
  rec.dispatch(spec, [b.dqkv, b.qkv, b.norm.q, b.norm.k], gpu.grid(Math.ceil(rows / perGroup)), params);
  return layout;
}
