// CPU references for the gated MLP activation (h = act(g) * u, act silu or GELU tanh) and its backward, in plain loops.

export type GatedAct = "silu" | "gelu_tanh";

const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

/** act(x) and act'(x). */
function act(kind: GatedAct, x: number): [number, number] {
  if (kind === "gelu_tanh") {
    const t = Math.tanh(GELU_C * (x + GELU_A * x * x * x));
    return [0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * x * x)];
  }
  const s = sigmoid(x);
  return [x * s, s * (1 + x * (1 - s))];
}

/** h = act(g) * u, elementwise. Works in f32 or f64 depending on the output type. */
export function swigluReference(
  g: ArrayLike<number>,
  u: ArrayLike<number>,
  out: Float32Array | Float64Array = new Float32Array(g.length),
  kind: GatedAct = "silu",
): Float32Array | Float64Array {
  for (let i = 0; i < g.length; i++) out[i] = act(kind, g[i])[0] * u[i];
  return out;
}

/** dg and du from the upstream gradient dh. */
export function swigluBackwardReference(
  g: ArrayLike<number>,
  u: ArrayLike<number>,
  dh: ArrayLike<number>,
  kind: GatedAct = "silu",
): { dg: Float32Array; du: Float32Array } {
  const dg = new Float32Array(g.length);
  const du = new Float32Array(g.length);
  for (let i = 0; i < g.length; i++) {
    const [a, da] = act(kind, g[i]);
    dg[i] = dh[i] * u[i] * da;
    du[i] = dh[i] * a;
  }
  return { dg, du };
}
