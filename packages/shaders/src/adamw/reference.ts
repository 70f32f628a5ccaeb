// CPU reference for AdamW with global grad-norm clipping (PyTorch's clip_grad_norm_ + AdamW order),
// one step over flat f32 arrays; weights and moments are stored as f32 after the step, like the GPU's.
import type { AdamWConfig } from "./index.ts";

export interface AdamWState {
  weights: Float32Array;
  m: Float32Array;
  v: Float32Array;
}

export function gradNormReference(grads: ArrayLike<number>, maxNorm: number) {
  let ss = 0;
  for (let i = 0; i < grads.length; i++) ss += grads[i] * grads[i];
  const norm = Math.sqrt(ss);
  const clip = maxNorm > 0 ? Math.min(1, maxNorm / (norm + 1e-6)) : 1;
  return { norm, clip, finite: Number.isFinite(ss) };
}

/** Returns the state after step `step` (1-based); a non-finite grad norm returns it unchanged. */
export function adamwReference(s: AdamWState, grads: ArrayLike<number>, c: AdamWConfig, step: number) {
  const { norm, clip, finite } = gradNormReference(grads, c.maxNorm);
  const out = { weights: s.weights.slice(), m: s.m.slice(), v: s.v.slice(), norm, clip, finite };
  if (!finite) return out;
  const bc1 = 1 - c.beta1 ** step;
  const bc2 = 1 - c.beta2 ** step;
  for (let i = 0; i < grads.length; i++) {
    const g = grads[i] * clip;
    const m = c.beta1 * s.m[i] + (1 - c.beta1) * g;
    const v = c.beta2 * s.v[i] + (1 - c.beta2) * g * g;
    out.m[i] = m;
    out.v[i] = v;
    const w = s.weights[i] * (1 - c.lr * c.weightDecay);
    out.weights[i] = w - (c.lr * (m / bc1)) / (Math.sqrt(v / bc2) + c.eps);
  }
  return out;
}
