// CPU reference for RoPE (rotate-half pairing), in JS doubles so it also serves finite differences. The angle is
// pos * invFreq rounded to f32, as HF computes it; cos and sin are then exact. And ropeQkv's, composed of the ops
// it stands for.
import { kvcacheWriteReference } from "../kvcache/reference.ts";
import { rmsnormBackwardReference, rmsnormReference } from "../rmsnorm/reference.ts";

/** y (N, heads, D) = x rotated by +angle (sign 1, forward) or -angle (sign -1, backward). */
export function ropeReference(
  x: ArrayLike<number>,
  pos: ArrayLike<number>,
  invFreq: ArrayLike<number>,
  n: number,
  heads: number,
  d: number,
  sign: 1 | -1 = 1,
  posStride = 2,
): Float64Array {
  const half = d / 2;
  const y = new Float64Array(n * heads * d);
  for (let t = 0; t < n; t++) {
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * d;
      for (let i = 0; i < half; i++) {
        const a = Math.fround(pos[t * posStride + posStride - 1] * invFreq[i]);
        const c = Math.cos(a);
        const s = sign * Math.sin(a);
        const u = x[base + i];
        const v = x[base + i + half];
        y[base + i] = u * c - v * s;
        y[base + i + half] = v * c + u * s;
      }
    }
  }
  return y;
}

/** ropeQkv as its parts: split the packed rows, per-head RMSNorm of q and k (when `norm`), RoPE, the cache write. */
export function ropeQkvReference(
  qkv: ArrayLike<number>,
  slotPos: ArrayLike<number>,
  invFreq: ArrayLike<number>,
  kc: ArrayLike<number>,
  vc: ArrayLike<number>,
  dims: { n: number; h: number; kv: number; d: number; ldq: number; slots: number; tmax: number },
  norm?: { q: ArrayLike<number>; k: ArrayLike<number>; eps: number },
): { q: Float64Array; kc: Float32Array; vc: Float32Array } {
  const { n, h, kv, d, ldq, slots, tmax } = dims;
  const part = (col: number, heads: number) => {
    const out = new Float32Array(n * heads * d);
    for (let t = 0; t < n; t++) for (let e = 0; e < heads * d; e++) out[t * heads * d + e] = qkv[t * ldq + col + e];
    return out;
  };
  let q: ArrayLike<number> = part(0, h);
  let k: ArrayLike<number> = part(h * d, kv);
  const v = part((h + kv) * d, kv);
  if (norm) {
    q = rmsnormReference(q, norm.q, n * h, d, norm.eps).y;
    k = rmsnormReference(k, norm.k, n * kv, d, norm.eps).y;
  }
  const qr = ropeReference(q, slotPos, invFreq, n, h, d);
  const kr = ropeReference(k, slotPos, invFreq, n, kv, d);
  return { q: qr, ...kvcacheWriteReference(kc, vc, kr, v, slotPos, n, kv * d, slots, tmax) };
}

/** qkNormBackwardPacked as its parts: each q and k head row of the packed dqkv taken back through rmsnormBackward of
 *  the same row of qkv (its rstd recomputed); the v heads and columns past them copied. */
export function qkNormBackwardPackedReference(
  qkv: ArrayLike<number>,
  dqkv: ArrayLike<number>,
  norm: { q: ArrayLike<number>; k: ArrayLike<number>; eps: number },
  dims: { n: number; h: number; kv: number; d: number; ldq: number },
): Float64Array {
  const { n, h, kv, d, ldq } = dims;
  const out = Float64Array.from(dqkv);
  for (let t = 0; t < n; t++) {
    for (let r = 0; r < h + kv; r++) {
      const at = t * ldq + r * d;
      const x = Array.from({ length: d }, (_, e) => qkv[at + e]);
      const dy = Array.from({ length: d }, (_, e) => dqkv[at + e]);
      const w = r < h ? norm.q : norm.k;
      const { rstd } = rmsnormReference(x, w, 1, d, norm.eps, Float64Array);
      out.set(rmsnormBackwardReference(x, w, rstd, dy, 1, d).dx, at);
    }
  }
  return out;
}
