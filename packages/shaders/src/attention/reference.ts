// CPU references for attention, materialising each row's scores, in JS doubles so they also serve finite
// differences: the forward over a KV cache (any slots and positions) and the backward in the training layout.
// N tokens, H heads, KV kv-heads, D head dim, S slots, Tmax rows per slot, B sequences of T tokens.

export interface CacheDims {
  n: number;
  h: number;
  kv: number;
  d: number;
  slots: number;
  tmax: number;
  scale: number;
  /** Sliding window: token pos sees keys pos - window + 1..pos only; default none. */
  window?: number;
}

/** The first key a query at `pos` sees. */
const firstKey = (pos: number, window = Infinity): number => Math.max(0, pos - window + 1);

/** o (N, H, D) and lse (N, H): token (slot s, pos p) attends to cache rows 0..p of slot s (the last `window` of them
 * under a sliding window); bad slots/pos give 0. */
export function attentionReference(
  q: ArrayLike<number>,
  slotPos: ArrayLike<number>,
  kc: ArrayLike<number>,
  vc: ArrayLike<number>,
  dims: CacheDims,
): { o: Float64Array; lse: Float64Array } {
  const { n, h: H, kv: KV, d: D, slots, tmax, scale } = dims;
  const o = new Float64Array(n * H * D);
  const lse = new Float64Array(n * H);
  for (let t = 0; t < n; t++) {
    const [s, pos] = [slotPos[2 * t], slotPos[2 * t + 1]];
    if (s >= slots || pos >= tmax) continue;
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / (H / KV));
      const row = (t * H + h) * D;
      const key = (j: number) => ((s * tmax + j) * KV + kvh) * D;
      const sc = new Float64Array(pos + 1);
      const j0 = firstKey(pos, dims.window);
      let mx = -Infinity;
      for (let j = j0; j <= pos; j++) {
        let x = 0;
        for (let d = 0; d < D; d++) x += q[row + d] * kc[key(j) + d];
        sc[j] = x * scale;
        mx = Math.max(mx, sc[j]);
      }
      let sum = 0;
      for (let j = j0; j <= pos; j++) sum += sc[j] = Math.exp(sc[j] - mx);
      for (let j = j0; j <= pos; j++) for (let d = 0; d < D; d++) o[row + d] += (sc[j] / sum) * vc[key(j) + d];
      lse[t * H + h] = mx + Math.log(sum);
    }
  }
  return { o, lse };
}

export interface TrainDims {
  b: number;
  t: number;
  h: number;
  kv: number;
  d: number;
  scale: number;
  window?: number;
}

/** Forward in the training layout: q (B*T, H, D), k, v (B, T, KV, D), causal within each sequence. */
export function attentionTrainReference(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  dims: TrainDims,
) {
  const { b, t, h, kv, d, scale, window } = dims;
  const slotPos = new Uint32Array(2 * b * t);
  for (let i = 0; i < b * t; i++) slotPos.set([Math.floor(i / t), i % t], 2 * i);
  return attentionReference(q, slotPos, k, v, { n: b * t, h, kv, d, slots: b, tmax: t, scale, window });
}

/** dq (B*T, H, D), dk and dv (B, T, KV, D) given the upstream gradient dout (B*T, H, D). */
export function attentionBackwardReference(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  dout: ArrayLike<number>,
  dims: TrainDims,
): { dq: Float64Array; dk: Float64Array; dv: Float64Array } {
  const { b: B, t: T, h: H, kv: KV, d: D, scale } = dims;
  const dq = new Float64Array(B * T * H * D);
  const dk = new Float64Array(B * T * KV * D);
  const dv = new Float64Array(B * T * KV * D);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const kvh = Math.floor(h / (H / KV));
        const row = ((b * T + t) * H + h) * D;
        const key = (j: number) => ((b * T + j) * KV + kvh) * D;
        const p = new Float64Array(t + 1);
        const dp = new Float64Array(t + 1);
        const j0 = firstKey(t, dims.window);
        let mx = -Infinity;
        for (let j = j0; j <= t; j++) {
          for (let d = 0; d < D; d++) {
            p[j] += q[row + d] * k[key(j) + d];
            dp[j] += dout[row + d] * v[key(j) + d];
          }
          p[j] *= scale;
          mx = Math.max(mx, p[j]);
        }
        let sum = 0;
        for (let j = j0; j <= t; j++) sum += p[j] = Math.exp(p[j] - mx);
        let di = 0; // sum_j P_j dP_j = rowsum(do * o)
        for (let j = j0; j <= t; j++) di += (p[j] /= sum) * dp[j];
        for (let j = j0; j <= t; j++) {
          const ds = p[j] * (dp[j] - di);
          for (let d = 0; d < D; d++) {
            dq[row + d] += scale * ds * k[key(j) + d];
            dk[key(j) + d] += scale * ds * q[row + d];
            dv[key(j) + d] += p[j] * dout[row + d];
          }
        }
      }
    }
  }
  return { dq, dk, dv };
}
