// CPU reference for RoPE (rotate-half pairing), in JS doubles so it also serves finite differences. The angle is
// pos * invFreq rounded to f32, as HF computes it; cos and sin are then exact.

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
