// CPU references for SwiGLU (h = silu(g) * u) and its backward, in plain loops.

const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));

/** h = silu(g) * u, elementwise. Works in f32 or f64 depending on the output type. */
export function swigluReference(
  g: ArrayLike<number>,
  u: ArrayLike<number>,
  out: Float32Array | Float64Array = new Float32Array(g.length),
): Float32Array | Float64Array {
  for (let i = 0; i < g.length; i++) out[i] = g[i] * sigmoid(g[i]) * u[i];
  return out;
}

/** dg and du from the upstream gradient dh. */
export function swigluBackwardReference(
  g: ArrayLike<number>,
  u: ArrayLike<number>,
  dh: ArrayLike<number>,
): { dg: Float32Array; du: Float32Array } {
  const dg = new Float32Array(g.length);
  const du = new Float32Array(g.length);
  for (let i = 0; i < g.length; i++) {
    const s = sigmoid(g[i]);
    dg[i] = dh[i] * u[i] * s * (1 + g[i] * (1 - s));
    du[i] = dh[i] * g[i] * s;
  }
  return { dg, du };
}
