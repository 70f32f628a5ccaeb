// CPU reference for the decode matvec y = x·Wᵀ (+ bias): plain loops, f32 accumulation; and for its fused form,
// composed of the other ops' references.
import { loraReference } from "../lora/reference.ts";
import { rmsnormReference } from "../rmsnorm/reference.ts";
import { swigluReference, type GatedAct } from "../swiglu/reference.ts";

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

export interface MatvecFusedRefOptions {
  M: number;
  K: number;
  ldx?: number;
  ldy?: number;
  offsetX?: number;
  offsetY?: number;
  /** Rows of W at element offsets, with their bias offsets and LoRA terms (B inside `lora.params` at `b`). */
  segments: {
    rows: number;
    offsetW: number;
    offsetBias?: number;
    lora?: { rank: number; scale: number; b: number; tCol: number };
  }[];
  norm?: { weight: ArrayLike<number>; eps: number };
  gated?: GatedAct;
  accumulate?: boolean;
  bias?: ArrayLike<number>;
  lora?: { t: ArrayLike<number>; ldt: number; params: ArrayLike<number> };
}

/**
 * The fused decode matvec as the ops it stands for, one after another: RMSNorm of x's rows, each segment's
 * x·Wᵀ (+ bias), its LoRA term y += s·t·Bᵀ, then act(seg 0)·seg 1 (gated) or the segments side by side, then
 * y = or y +=.
 */
export function matvecFusedReference(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  y: Float32Array,
  o: MatvecFusedRefOptions,
): Float32Array {
  const { M, K, ldx = K, offsetX = 0, offsetY = 0 } = o;
  const rows = new Float32Array(M * K);
  for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) rows[m * K + k] = x[offsetX + m * ldx + k];
  const xn = o.norm ? rmsnormReference(rows, o.norm.weight, M, K, o.norm.eps).y : rows;
  const outs = o.segments.map((s) => {
    const z = matvecReference(
      xn,
      w,
      new Float32Array(M * s.rows),
      { M, N: s.rows, K, offsetW: s.offsetW },
      o.bias,
      s.offsetBias,
    );
    const l = s.lora;
    if (!l) return z;
    const t = new Float32Array(M * l.rank);
    for (let m = 0; m < M; m++)
      for (let r = 0; r < l.rank; r++) t[m * l.rank + r] = o.lora!.t[m * o.lora!.ldt + l.tCol + r];
    const B = Array.from({ length: s.rows * l.rank }, (_, i) => o.lora!.params[l.b + i]);
    // loraReference with A = I (R, R) turns t into itself: y = z + s·t·Bᵀ.
    const I = new Float32Array(l.rank * l.rank).map((_, i) => (i % (l.rank + 1) === 0 ? 1 : 0));
    return loraReference({ N: M, in: l.rank, out: s.rows, R: l.rank, scale: l.scale }, t, I, B, z).y;
  });
  let N: number;
  let out: ArrayLike<number>;
  if (o.gated) {
    N = o.segments[0].rows;
    out = swigluReference(outs[0], outs[1], new Float32Array(M * N), o.gated);
  } else {
    N = outs.reduce((a, z) => a + z.length / M, 0);
    const cat = new Float32Array(M * N);
    for (let m = 0; m < M; m++) {
      let c = 0;
      for (const z of outs) {
        const n = z.length / M;
        cat.set(z.subarray(m * n, (m + 1) * n), m * N + c);
        c += n;
      }
    }
    out = cat;
  }
  const ldy = o.ldy ?? N;
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      const i = offsetY + m * ldy + n;
      y[i] = o.accumulate ? Math.fround(y[i] + out[m * N + n]) : out[m * N + n];
    }
  }
  return y;
}
