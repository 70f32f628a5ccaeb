// How far apart two results of one problem are: what start-up tuning checks before it trusts a variant that has not
// run on a GPU yet against one that has.

/** The largest |x - y| relative to the largest |x|; Infinity where either holds NaN or x is all zeros. */
export function relMaxDiff(x: ArrayLike<number>, y: ArrayLike<number>): number {
  let scale = 0;
  let d = 0;
  for (let i = 0; i < x.length; i++) {
    scale = Math.max(scale, Math.abs(x[i]));
    d = Math.max(d, Math.abs(x[i] - y[i]));
  }
  return Number.isNaN(d) || !(scale > 0) ? Infinity : d / scale;
}
