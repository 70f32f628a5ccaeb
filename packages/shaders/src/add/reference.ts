// CPU reference for the residual add.
export function addReference(a: ArrayLike<number>, b: ArrayLike<number>): Float32Array {
  const y = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
  return y;
}
