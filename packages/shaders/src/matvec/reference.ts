// CPU reference for the decode matvec y = x·Wᵀ (+ bias): plain loops, f32 accumulation.

/** x (M, K) with row stride ldx, W (N, K) from element offsetW, y (M, N) written into `y` with row stride ldy. */
export function matvecReference(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  y: Float32Array,
  d: {
    M: number;
    N: number;
    K: number;
    ldx?: number;
    ldy?: number;
    offsetX?: number;
    offsetW?: number;
    offsetY?: number;
  },
  bias?: ArrayLike<number>,
  offsetBias = 0,
): Float32Array {
  const { M, N, K, ldx = K, ldy = N, offsetX = 0, offsetW = 0, offsetY = 0 } = d;
  const f = Math.fround;
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s = f(s + f(x[offsetX + m * ldx + k] * w[offsetW + n * K + k]));
      y[offsetY + m * ldy + n] = bias ? f(s + bias[offsetBias + n]) : s;
    }
  }
  return y;
}
