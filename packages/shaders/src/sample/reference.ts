// CPU reference for GPU sampling: the same threshold semantics for top-k / top-p (ties at the
// threshold are kept), the same hash for the uniform, inverse CDF in vocabulary index order.
import type { SampleRow } from "./index.ts";

const NONE = 0xffffffff;

/** The GPU's PCG-style 3-D hash of (seed, step, stream), first lane, as a uniform in [0, 1). */
export function sampleUniform(seed: number, step: number, stream: number): number {
  let x = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  let y = (Math.imul(step, 1664525) + 1013904223) >>> 0;
  let z = (Math.imul(stream, 1664525) + 1013904223) >>> 0;
  const round = () => {
    x = (x + Math.imul(y, z)) >>> 0;
    y = (y + Math.imul(z, x)) >>> 0;
    z = (z + Math.imul(x, y)) >>> 0;
  };
  round();
  x = (x ^ (x >>> 16)) >>> 0;
  y = (y ^ (y >>> 16)) >>> 0;
  z = (z ^ (z >>> 16)) >>> 0;
  round();
  return (x >>> 8) / 16777216;
}

export interface SampleReference {
  tokens: Uint32Array; // (B,)
  logprobs: Float64Array; // (B,)
  /** The filtered, renormalised distribution each row sampled from. */
  probs: Float64Array[]; // B × (V,)
  /** Distance from u to the nearest CDF step (in probability): tiny means rounding may pick a neighbour. */
  margin: Float64Array; // (B,)
}

export function sampleReference(
  logits: ArrayLike<number>, // (B, V)
  B: number,
  V: number,
  rows: SampleRow[],
  mask?: Uint32Array, // (B, ceil(V / 32))
  logprobAtTemperature = false,
): SampleReference {
  const words = Math.ceil(V / 32);
  const out: SampleReference = {
    tokens: new Uint32Array(B),
    logprobs: new Float64Array(B),
    probs: [],
    margin: new Float64Array(B),
  };
  for (let b = 0; b < B; b++) {
    const r = rows[b];
    const x = (j: number) => logits[b * V + j];
    const greedy = !(r.temperature > 0);
    const ydiv = logprobAtTemperature && !greedy ? r.temperature : 1;
    let m = -Infinity;
    for (let j = 0; j < V; j++) m = Math.max(m, x(j) / ydiv);
    let s = 0;
    for (let j = 0; j < V; j++) s += Math.exp(x(j) / ydiv - m);
    const lse = m + Math.log(s);
    const allowed: number[] = [];
    for (let j = 0; j < V; j++) if (!mask || (mask[b * words + (j >>> 5)] >>> (j & 31)) & 1) allowed.push(j);
    const probs = new Float64Array(V);
    out.probs.push(probs);
    if (!allowed.length) {
      out.tokens[b] = NONE;
      out.logprobs[b] = -Infinity;
      continue;
    }
    const zdiv = greedy ? 1 : r.temperature;
    const z = (j: number) => Math.fround(x(j) / zdiv);
    let arg = allowed[0];
    for (const j of allowed) if (z(j) > z(arg)) arg = j;
    let tok = arg;
    if (greedy) {
      probs[arg] = 1;
      out.margin[b] = 1;
    } else {
      const zmax = z(arg);
      const sorted = allowed.map(z).sort((p, q) => q - p);
      let tau = sorted[sorted.length - 1];
      const k = r.topK ?? 0;
      if (k > 0 && k < allowed.length) tau = sorted[k - 1];
      const topP = r.topP ?? 1;
      if (topP < 1) {
        let mk = 0;
        for (const v of sorted) if (v >= tau) mk += Math.exp(v - zmax);
        let cum = 0;
        for (let i = 0; i < sorted.length; i++) {
          cum += Math.exp(sorted[i] - zmax);
          const lastOfTie = i + 1 === sorted.length || sorted[i + 1] !== sorted[i];
          if (lastOfTie && cum >= topP * mk) {
            tau = Math.max(tau, sorted[i]);
            break;
          }
        }
      }
      const kept = allowed.filter((j) => z(j) >= tau);
      let w = 0;
      for (const j of kept) w += Math.exp(z(j) - zmax);
      const target = sampleUniform(r.seed, r.step, r.stream ?? b) * w;
      let acc = 0;
      let margin = Infinity;
      tok = NONE;
      for (const j of kept) {
        acc += Math.exp(z(j) - zmax);
        probs[j] = Math.exp(z(j) - zmax) / w;
        margin = Math.min(margin, Math.abs(acc - target) / w);
        if (tok === NONE && acc > target) tok = j;
      }
      if (tok === NONE) tok = kept[kept.length - 1];
      out.margin[b] = margin;
    }
    out.tokens[b] = tok;
    out.logprobs[b] = x(tok) / ydiv - lse;
  }
  return out;
}
