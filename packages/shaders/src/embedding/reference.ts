// CPU references for the embedding lookup and its scatter-add backward, in plain loops.

type Floats = Float32Array | Float64Array;

/** out[n, :] = W[ids[n], :] * scale for W (V, C) given as the f32 values it holds (16-bit tables: after rounding). */
export function embeddingReference(
  W: ArrayLike<number>, // (V, C)
  ids: ArrayLike<number>, // (N)
  C: number,
  Out: new (n: number) => Floats = Float32Array,
  scale = 1,
): Floats {
  const out = new Out(ids.length * C); // (N, C)
  for (let n = 0; n < ids.length; n++) for (let c = 0; c < C; c++) out[n * C + c] = W[ids[n] * C + c] * scale;
  return out;
}

/** dW (V, C) += scatter of dout (N, C) by ids; starts from dW0 when given (e.g. the LM head's gradient). */
export function embeddingBackwardReference(
  dout: ArrayLike<number>, // (N, C)
  ids: ArrayLike<number>, // (N)
  V: number,
  C: number,
  dW0?: ArrayLike<number>,
): Float32Array {
  const dW = new Float32Array(V * C);
  if (dW0) dW.set(dW0);
  for (let n = 0; n < ids.length; n++) for (let c = 0; c < C; c++) dW[ids[n] * C + c] += dout[n * C + c];
  return dW;
}
