// CPU references for a LoRA adapter on a linear layer: y += s * (x·Aᵀ)·Bᵀ, and its backward, in plain loops.
// N tokens, x (N, in), A (R, in), B (out, R), s = alpha / R.

type Floats = Float32Array | Float64Array;

export interface LoraRefDims {
  N: number;
  in: number;
  out: number;
  R: number;
  scale: number;
}

/** t = x·Aᵀ (N, R) and y = y0 + s·t·Bᵀ (N, out); pass Float64Array as `Out` for f64 math. */
export function loraReference(
  d: LoraRefDims,
  x: ArrayLike<number>, // (N, in)
  A: ArrayLike<number>, // (R, in)
  B: ArrayLike<number>, // (out, R)
  y0?: ArrayLike<number>, // (N, out)
  Out: new (n: number) => Floats = Float32Array,
): { t: Floats; y: Floats } {
  const t = new Out(d.N * d.R);
  const y = new Out(d.N * d.out);
  if (y0) y.set(y0);
  for (let n = 0; n < d.N; n++) {
    for (let r = 0; r < d.R; r++) {
      let acc = 0;
      for (let k = 0; k < d.in; k++) acc += x[n * d.in + k] * A[r * d.in + k];
      t[n * d.R + r] = acc;
    }
    for (let o = 0; o < d.out; o++) {
      let acc = 0;
      for (let r = 0; r < d.R; r++) acc += t[n * d.R + r] * B[o * d.R + r];
      y[n * d.out + o] += d.scale * acc;
    }
  }
  return { t, y };
}

/** dt = s·dy·B, dB = s·dyᵀ·t, dA = dtᵀ·x, dx = dt·A (the LoRA part only; callers add what was there). */
export function loraBackwardReference(
  d: LoraRefDims,
  x: ArrayLike<number>, // (N, in)
  A: ArrayLike<number>, // (R, in)
  B: ArrayLike<number>, // (out, R)
  t: ArrayLike<number>, // (N, R)
  dy: ArrayLike<number>, // (N, out)
): { dt: Float32Array; dA: Float32Array; dB: Float32Array; dx: Float32Array } {
  const { N, R, scale } = d;
  const dt = new Float32Array(N * R);
  const dA = new Float32Array(R * d.in);
  const dB = new Float32Array(d.out * R);
  const dx = new Float32Array(N * d.in);
  for (let n = 0; n < N; n++) {
    for (let r = 0; r < R; r++) {
      let acc = 0;
      for (let o = 0; o < d.out; o++) acc += dy[n * d.out + o] * B[o * R + r];
      dt[n * R + r] = scale * acc;
    }
  }
  for (let o = 0; o < d.out; o++) {
    for (let r = 0; r < R; r++) {
      let acc = 0;
      for (let n = 0; n < N; n++) acc += dy[n * d.out + o] * t[n * R + r];
      dB[o * R + r] = scale * acc;
    }
  }
  for (let r = 0; r < R; r++) {
    for (let k = 0; k < d.in; k++) {
      let acc = 0;
      for (let n = 0; n < N; n++) acc += dt[n * R + r] * x[n * d.in + k];
      dA[r * d.in + k] = acc;
    }
  }
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < d.in; k++) {
      let acc = 0;
      for (let r = 0; r < R; r++) acc += dt[n * R + r] * A[r * d.in + k];
      dx[n * d.in + k] = acc;
    }
  }
  return { dt, dA, dB, dx };
}

/** W + s·B·A for W (out, in), B (out, R), A (R, in), in f64. */
export function loraMergeReference(
  d: { out: number; in: number; R: number; scale: number },
  W: ArrayLike<number>,
  A: ArrayLike<number>,
  B: ArrayLike<number>,
): Float64Array {
  const y = Float64Array.from(W);
  for (let o = 0; o < d.out; o++)
    for (let c = 0; c < d.in; c++) {
      let acc = 0;
      for (let r = 0; r < d.R; r++) acc += B[o * d.R + r] * A[r * d.in + c];
      y[o * d.in + c] += d.scale * acc;
    }
  return y;
}
