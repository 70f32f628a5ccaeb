// CPU reference for matmul: C = alpha·op(A)·op(B) (+ bias) (+ C), plain loops, f32 accumulation,
// with the same strides, offsets, batch broadcasting and shard layout as the GPU kernels.

export interface MatmulRefDims {
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
  batch?: number;
  lda?: number;
  ldb?: number;
  ldc?: number;
  offsetA?: number;
  offsetB?: number;
  offsetC?: number;
  /** Per-batch strides in elements; 0 broadcasts one matrix to every batch. */
  strideA?: number;
  strideB?: number;
  strideC?: number;
  alpha?: number;
  accumulate?: boolean;
  offsetBias?: number;
}

/**
 * Writes into `c` (a copy of the output buffer's prior contents, so untouched elements stay) and
 * returns it. `b` holds plain f32 values: for 16-bit weights pass `roundHalf(values)`.
 */
export function matmulReference(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  c: Float32Array,
  d: MatmulRefDims,
  bias?: ArrayLike<number>,
): Float32Array {
  const { M, N, K, transA = false, transB = false, batch = 1, alpha = 1, accumulate = false } = d;
  const lda = d.lda ?? (transA ? M : K);
  const ldb = d.ldb ?? (transB ? K : N);
  const ldc = d.ldc ?? N;
  const sA = d.strideA ?? (transA ? K : M) * lda;
  const sB = d.strideB ?? (transB ? N : K) * ldb;
  const sC = d.strideC ?? M * ldc;
  const f = Math.fround;
  for (let z = 0; z < batch; z++) {
    const oa = (d.offsetA ?? 0) + z * sA;
    const ob = (d.offsetB ?? 0) + z * sB;
    const oc = (d.offsetC ?? 0) + z * sC;
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        let s = 0;
        for (let k = 0; k < K; k++) {
          const x = a[oa + (transA ? k * lda + m : m * lda + k)];
          const y = b[ob + (transB ? n * ldb + k : k * ldb + n)];
          s = f(s + f(x * y));
        }
        let v = f(alpha * s);
        if (bias) v = f(v + bias[(d.offsetBias ?? 0) + n]);
        const idx = oc + m * ldc + n;
        if (accumulate) v = f(v + c[idx]);
        c[idx] = v;
      }
    }
  }
  return c;
}

/** absMax's reference: max |x[offset .. offset + n)|, and the power of two the coop matmul's scaleA multiplies by
 *  (bringing that max to [2^14, 2^15); exponents clamped to [-126, 126] as the kernel does). */
export function absMaxReference(x: ArrayLike<number>, n: number, offset = 0): { max: number; scale: number } {
  let max = 0;
  for (let i = offset; i < offset + n; i++) max = Math.max(max, Math.abs(x[i]));
  const e = max > 0 ? Math.floor(Math.log2(Math.fround(max))) : -127;
  return { max: Math.fround(max), scale: 2 ** Math.min(126, Math.max(-126, 14 - e)) };
}
