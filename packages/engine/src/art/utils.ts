// ART's art.utils helpers for training loops: iterateDataset (epochs of seeded-shuffled batches, resumable at a
// step), limitConcurrency (a semaphore around a rollout) and retry (exponential backoff).
import { Rng } from "@webart/gpu";

export interface DatasetBatch<T> {
  /** This step's items (groupsPerStep of them; the last batch of an epoch may hold fewer). */
  items: T[];
  /** The global step, counted across epochs from 0. */
  step: number;
  /** The epoch, from 0. */
  epoch: number;
  /** The step within the epoch, from 0. */
  epochStep: number;
}

export interface IterateDatasetOptions {
  /** Items per batch (ART's groups_per_step). Default 1. */
  groupsPerStep?: number;
  /** Passes over the items. Default 1. */
  numEpochs?: number;
  /** Batches before this global step are skipped (resume at `await model.getStep()`). Default 0. */
  initialStep?: number;
  /** Seed of each epoch's shuffle: epoch e of seed s is always the same order. Default 0. */
  seed?: number;
  /** Shuffle each epoch (default true); false keeps the items' order. */
  shuffle?: boolean;
}

const checkInt = (where: string, v: number, min: number) => {
  if (!Number.isInteger(v) || v < min) throw new Error(`${where}: ${String(v)} must be an integer >= ${min}`);
  return v;
};

/**
 * Batches of `items` over `numEpochs` epochs, each epoch in its own seeded order, skipping the batches before
 * `initialStep`: the same arguments give the same batches, so a resumed run sees the ones it had not yet seen.
 * Batches per epoch: ceil(items / groupsPerStep).
 */
export function* iterateDataset<T>(items: readonly T[], opts: IterateDatasetOptions = {}): Generator<DatasetBatch<T>> {
  for (const k of Object.keys(opts))
    if (!["groupsPerStep", "numEpochs", "initialStep", "seed", "shuffle"].includes(k))
      throw new Error(`iterateDataset: unknown option "${k}"`);
  const per = checkInt("iterateDataset: groupsPerStep", opts.groupsPerStep ?? 1, 1);
  const epochs = checkInt("iterateDataset: numEpochs", opts.numEpochs ?? 1, 0);
  const initial = checkInt("iterateDataset: initialStep", opts.initialStep ?? 0, 0);
  const seed = checkInt("iterateDataset: seed", opts.seed ?? 0, 0);
  const n = items.length;
  if (n === 0) return;
  const stepsPerEpoch = Math.ceil(n / per);
  for (let epoch = Math.floor(initial / stepsPerEpoch); epoch < epochs; epoch++) {
    const order = items.map((_, i) => i);
    if (opts.shuffle ?? true) {
      // Fisher-Yates with the project's one seeded generator, seeded per (seed, epoch).
      const rng = new Rng((Math.imul(seed, 1_000_003) + epoch) >>> 0);
      for (let i = n - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [order[i], order[j]] = [order[j], order[i]];
      }
    }
    for (let epochStep = 0; epochStep < stepsPerEpoch; epochStep++) {
      const step = epoch * stepsPerEpoch + epochStep;
      if (step < initial) continue;
      yield { items: order.slice(epochStep * per, (epochStep + 1) * per).map((i) => items[i]), step, epoch, epochStep };
    }
  }
}

/**
 * A wrapper that lets at most `n` calls of `fn` run at once (per key, when `deriveKey` is given); the rest wait
 * in arrival order. ART's `@limit_concurrency(n)` for a rollout function.
 */
export function limitConcurrency<A extends unknown[], R>(
  n: number,
  fn: (...args: A) => Promise<R>,
  deriveKey?: (...args: A) => string,
): (...args: A) => Promise<R> {
  checkInt("limitConcurrency: n", n, 1);
  const slots = new Map<string, { active: number; waiting: (() => void)[] }>();
  return async (...args: A) => {
    const key = deriveKey ? deriveKey(...args) : "";
    let s = slots.get(key);
    if (!s) slots.set(key, (s = { active: 0, waiting: [] }));
    if (s.active >= n) await new Promise<void>((r) => s.waiting.push(r));
    else s.active++;
    try {
      return await fn(...args);
    } finally {
      // Hand the slot straight to the next waiter (active stays the same), or free it.
      const next = s.waiting.shift();
      if (next) next();
      else if (--s.active === 0) slots.delete(key);
    }
  };
}

export interface RetryOptions {
  /** Calls in all, the first included. Default 3. */
  maxAttempts?: number;
  /** Wait before the second attempt, in ms. Default 250. */
  delayMs?: number;
  /** Each later wait is the previous times this. Default 2. */
  backoffFactor?: number;
  /** Which errors are retried: error classes, or a test. Default: every error. */
  retryOn?: (abstract new (...args: never[]) => unknown)[] | ((e: unknown) => boolean);
  /** Called before each retry with the error and the attempt that failed (from 1); default: console.warn. */
  onRetry?: (e: unknown, attempt: number) => void;
}

/**
 * `fn` retried with exponential backoff (ART's `@retry`): an error `retryOn` accepts is retried until
 * `maxAttempts` calls have failed, then the last error is thrown; any other error is thrown at once.
 */
export function retry<A extends unknown[], R>(
  fn: (...args: A) => R | Promise<R>,
  opts: RetryOptions = {},
): (...args: A) => Promise<R> {
  for (const k of Object.keys(opts))
    if (!["maxAttempts", "delayMs", "backoffFactor", "retryOn", "onRetry"].includes(k))
      throw new Error(`retry: unknown option "${k}"`);
  const attempts = checkInt("retry: maxAttempts", opts.maxAttempts ?? 3, 1);
  const delay = opts.delayMs ?? 250;
  const factor = opts.backoffFactor ?? 2;
  if (!(delay >= 0)) throw new Error(`retry: delayMs: ${delay} must be >= 0`);
  if (!(factor >= 1)) throw new Error(`retry: backoffFactor: ${factor} must be >= 1`);
  const on = opts.retryOn;
  const retryable = (e: unknown) =>
    on === undefined ? true : Array.isArray(on) ? on.some((C) => e instanceof C) : on(e);
  const name = fn.name || "function";
  return async (...args: A) => {
    let wait = delay;
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn(...args);
      } catch (e) {
        if (attempt >= attempts || !retryable(e)) throw e;
        if (opts.onRetry) opts.onRetry(e, attempt);
        else
          console.warn(`retry ${attempt}/${attempts} of ${name} after: ${e instanceof Error ? e.message : String(e)}`);
        await new Promise((r) => setTimeout(r, wait));
        wait *= factor;
      }
    }
  };
}
