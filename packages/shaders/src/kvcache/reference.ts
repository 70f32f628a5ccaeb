// CPU reference for the KV-cache write: copies of the caches with each valid token's k, v rows scattered in.

export function kvcacheWriteReference(
  kc: ArrayLike<number>,
  vc: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  slotPos: ArrayLike<number>,
  n: number,
  row: number, // KV * D
  slots: number,
  tmax: number,
): { kc: Float32Array; vc: Float32Array } {
  const ko = Float32Array.from(kc);
  const vo = Float32Array.from(vc);
  for (let t = 0; t < n; t++) {
    const [s, pos] = [slotPos[2 * t], slotPos[2 * t + 1]];
    if (s >= slots || pos >= tmax) continue;
    for (let e = 0; e < row; e++) {
      ko[(s * tmax + pos) * row + e] = k[t * row + e];
      vo[(s * tmax + pos) * row + e] = v[t * row + e];
    }
  }
  return { kc: ko, vc: vo };
}
