// CPU references for RMSNorm over rows of length C (y = x * rstd * w) and its backward, in plain loops.

type Floats = Float32Array | Float64Array;

/** y and rstd; pass Float64Array as `Out` for f64 math (finite differences). */
export function rmsnormReference(
  x: ArrayLike<number>, // (rows, C)
  w: ArrayLike<number>, // (C)
  rows: number,
  C: number,
  eps: number,
  Out: new (n: number) => Floats = Float32Array,
): { y: Floats; rstd: Floats } {
  const y = new Out(rows * C);
  const rstd = new Out(rows);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let c = 0; c < C; c++) ss += x[r * C + c] * x[r * C + c];
    const s = 1 / Math.sqrt(ss / C + eps);
    rstd[r] = s;
    for (let c = 0; c < C; c++) y[r * C + c] = x[r * C + c] * s * w[c];
  }
  return { y, rstd };
}

/** dx = rstd * (w*dy - x * rstd^2 * mean(w*dy*x)) per row, and dw = sum over rows of dy * x * rstd. */
export function rmsnormBackwardReference(
  x: ArrayLike<number>, // (rows, C)
  w: ArrayLike<number>, // (C)
  rstd: ArrayLike<number>, // (rows)
  dy: ArrayLike<number>, // (rows, C)
  rows: number,
  C: number,
): { dx: Float32Array; dw: Float32Array } {
  const dx = new Float32Array(rows * C);
  const dw = new Float32Array(C);
  for (let r = 0; r < rows; r++) {
    const s = rstd[r];
    let dot = 0;
    for (let c = 0; c < C; c++) dot += w[c] * dy[r * C + c] * x[r * C + c];
    const k = (s * s * dot) / C;
    for (let c = 0; c < C; c++) {
      const i = r * C + c;
      dx[i] = s * (w[c] * dy[i] - x[i] * k);
      dw[c] += dy[i] * x[i] * s;
    }
  }
  return { dx, dw };
}
