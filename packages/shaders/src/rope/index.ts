// RoPE: inverse frequencies on the CPU (HF default, linear and Llama-3 scaling, so the scaling logic stays in TS) and the
// dispatches of the rotation (forward) and its inverse (backward) on (N, heads, D) rows, in place or not.
import { Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./rotate.wgsl";

const WG = 256;
const spec = (name: string): KernelSpec => ({ name, code, overrides: { WG } });
export const ropeForwardSpec = spec("rope_forward");
export const ropeForwardInplaceSpec = spec("rope_forward_inplace");
export const ropeBackwardSpec = spec("rope_backward");
export const ropeBackwardInplaceSpec = spec("rope_backward_inplace");

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

/** y = rope(x) on (N, heads, D) rows; pass y === x to rotate in place. `pos` holds each token's position. */
export function ropeForward(
  gpu: Gpu,
  rec: Recorder,
  x: GPUBuffer,
  y: GPUBuffer,
  pos: GPUBuffer,
  invFreq: GPUBuffer,
  dims: RopeDims,
): void {
  record(gpu, rec, x, y, pos, invFreq, dims, false);
}

/** dx = rope(dy) by the negative angle (the transpose of the rotation); dx === dy works in place. */
export function ropeBackward(
  gpu: Gpu,
  rec: Recorder,
  dy: GPUBuffer,
  dx: GPUBuffer,
  pos: GPUBuffer,
  invFreq: GPUBuffer,
  dims: RopeDims,
): void {
  record(gpu, rec, dy, dx, pos, invFreq, dims, true);
}
