// CPU references for chunked token logprobs: plain loops over the whole vocabulary at once (no
// chunking), accumulated in f64 so finite differences can be taken through them. `allowed` gives a row a set of
// tokens (a bitmask over the vocabulary, as packAllowed's): its softmax is over that set alone.

const isIn = (m: Uint32Array | null | undefined, j: number): boolean => !m || (m[j >>> 5] & (1 << (j & 31))) !== 0;

/** logprob of the target, lse and softmax entropy of logits / T for each of N rows of V. */
export function logprobsReference(
  logits: ArrayLike<number>, // (N, V)
  targets: ArrayLike<number>, // (N,)
  N: number,
  V: number,
  temperature = 1,
  allowed?: readonly (Uint32Array | null)[],
): { logprob: Float64Array; entropy: Float64Array; lse: Float64Array } {
  const logprob = new Float64Array(N);
  const entropy = new Float64Array(N);
  const lse = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    const a = allowed?.[n];
    let m = -Infinity;
    for (let j = 0; j < V; j++) if (isIn(a, j)) m = Math.max(m, logits[n * V + j] / temperature);
    let s = 0;
    for (let j = 0; j < V; j++) if (isIn(a, j)) s += Math.exp(logits[n * V + j] / temperature - m);
    lse[n] = m + Math.log(s);
    let h = 0;
    for (let j = 0; j < V; j++) {
      if (!isIn(a, j)) continue;
      const lp = logits[n * V + j] / temperature - lse[n];
      h -= Math.exp(lp) * lp;
    }
    entropy[n] = h;
    logprob[n] = logits[n * V + targets[n]] / temperature - lse[n];
  }
  return { logprob, entropy, lse };
}

/** dlogits (N, V) for upstream dlogp (N,) and optional dentropy (N,). */
export function logprobsBackwardReference(
  logits: ArrayLike<number>, // (N, V)
  targets: ArrayLike<number>, // (N,)
  N: number,
  V: number,
  temperature: number,
  dlogp: ArrayLike<number>, // (N,)
  dentropy?: ArrayLike<number>, // (N,)
  allowed?: readonly (Uint32Array | null)[],
): Float64Array {
  const { entropy, lse } = logprobsReference(logits, targets, N, V, temperature, allowed);
  const dlogits = new Float64Array(N * V);
  for (let n = 0; n < N; n++) {
    for (let j = 0; j < V; j++) {
      if (!isIn(allowed?.[n], j)) continue; // p_j = 0 off the set: dlogit 0
      const lp = logits[n * V + j] / temperature - lse[n];
      const pj = Math.exp(lp);
      let dx = ((j === targets[n] ? 1 : 0) - pj) * dlogp[n];
      if (dentropy) dx -= dentropy[n] * pj * (lp + entropy[n]);
      dlogits[n * V + j] = dx / temperature;
    }
  }
  return dlogits;
}
