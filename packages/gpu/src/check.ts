// Test helpers shared by every kernel: closeness with stated tolerances, central finite differences (in f64) to
// check each backward reference against its forward reference, and which kernels a run dispatched.
import { Recorder } from "./device.ts";

export interface Tolerance {
  atol: number;
  rtol: number;
}

export interface Mismatch {
  index: number;
  actual: number;
  expected: number;
  maxAbsErr: number;
  count: number;
}

/** Null when every |a - e| <= atol + rtol * |e| (NaN never passes); else the worst element. */
export function compare(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: Tolerance): Mismatch | null {
  if (actual.length !== expected.length) {
    return { index: -1, actual: actual.length, expected: expected.length, maxAbsErr: Infinity, count: 1 };
  }
  let worst: Mismatch | null = null;
  let worstExcess = 0;
  let count = 0;
  let maxAbsErr = 0;
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i];
    const e = expected[i];
    const err = Math.abs(a - e);
    if (Number.isFinite(err)) maxAbsErr = Math.max(maxAbsErr, err);
    const bound = tol.atol + tol.rtol * Math.abs(e);
    const bad = !(err <= bound) && !(a === e); // a === e covers matching infinities
    if (bad) {
      count++;
      const excess = Number.isFinite(err) ? err - bound : Infinity;
      if (!worst || excess > worstExcess) {
        worst = { index: i, actual: a, expected: e, maxAbsErr: 0, count: 0 };
        worstExcess = excess;
      }
    }
  }
  if (worst) {
    worst.maxAbsErr = maxAbsErr;
    worst.count = count;
  }
  return worst;
}

/** Throws a readable error naming the tensor, the worst element and the tolerance. */
export function assertClose(
  name: string,
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  tol: Tolerance,
): void {
  const m = compare(actual, expected, tol);
  if (!m) return;
  if (m.index < 0) throw new Error(`${name}: length ${m.actual} !== expected ${m.expected}`);
  throw new Error(
    `${name}: ${m.count}/${actual.length} elements off; worst [${m.index}] = ${m.actual} vs ${m.expected} ` +
      `(max |err| ${m.maxAbsErr.toExponential(3)}, atol ${tol.atol}, rtol ${tol.rtol})`,
  );
}

/**
 * Central finite differences of a scalar function of several inputs, in f64.
 * Returns d f / d inputs[k][i] for every k and i (or for `only` indices when given, others 0).
 */
export function finiteDiff(
  f: (inputs: Float64Array[]) => number,
  inputs: Float64Array[],
  eps = 1e-6,
  only?: (k: number, i: number) => boolean,
): Float64Array[] {
  return inputs.map((x, k) => {
    const g = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      if (only && !only(k, i)) continue;
      const x0 = x[i];
      x[i] = x0 + eps;
      const fp = f(inputs);
      x[i] = x0 - eps;
      const fm = f(inputs);
      x[i] = x0;
      g[i] = (fp - fm) / (2 * eps);
    }
    return g;
  });
}

/** sum(a * b): turns a tensor output into a scalar loss for finite differences, with random upstream grads b. */
export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

export const f64 = (a: ArrayLike<number>): Float64Array => Float64Array.from(a);

/** `run`'s result and the names of the kernels it dispatched (through any Recorder): to assert that a variant ran. */
export async function kernelsDispatched<T>(run: () => Promise<T>): Promise<{ result: T; names: Set<string> }> {
  const names = new Set<string>();
  const dispatch = Recorder.prototype.dispatch;
  Recorder.prototype.dispatch = function (spec, ...rest) {
    names.add(spec.name);
    return dispatch.call(this, spec, ...rest);
  };
  try {
    return { result: await run(), names };
  } finally {
    Recorder.prototype.dispatch = dispatch;
  }
}
