// Kernel variant choice by measurement: times each candidate once per device and problem key, keeps the winner
// with the device (Gpu.tuning), and turns a device's results into a table that can be persisted and loaded again.
import type { Gpu, Recorder, TuneEntry } from "@webart/gpu";

export type { TuneEntry } from "@webart/gpu";

declare const __WEBART_KERNELS__: string | undefined;

/** A hash of these kernels' sources, baked in by the package build (scripts/kernels-fingerprint.mjs; the tests define
 *  it too): saved tuning results are reused only under the same one. Undefined where the sources run unbuilt. */
export const KERNELS_FINGERPRINT: string | undefined =
  typeof __WEBART_KERNELS__ === "string" ? __WEBART_KERNELS__ : undefined;

/** Full key (device key + "|" + problem key) → entry: a device's results as they are persisted. */
export type TuneTable = Record<string, TuneEntry>;

export interface TuneOptions {
  /** Untimed runs first (pipeline compile, buffer warm-up). */
  warmup?: number;
  minReps?: number;
  /** Keep repeating a candidate until this much time is spent on it (bounded by maxReps). */
  minMs?: number;
  maxReps?: number;
  /** Where one call takes less than this (after warm-up, first candidate), each timed submit records enough calls
   * to take about this long, so a fast GPU's submit latency does not hide the candidates' differences. */
  minSubmitMs?: number;
  /** The candidates are in an order along which time changes one way past the best (e.g. rising thread counts): the
   * search stops at the first one HOPELESS times slower than the best so far, and the rest are not built or timed. */
  ordered?: boolean;
}

/** A candidate whose first timing is this many times the best first timing is not timed again. */
const HOPELESS = 3;
/** At most this many calls in one timed submit. */
const MAX_COPIES = 64;
/** Measurements under way, per device and key, so concurrent loads of one model time each problem once. */
const inflight = new WeakMap<Gpu, Map<string, Promise<string>>>();

const keys = new WeakMap<Gpu, string>();

/** Identifies a device and its settings: the same GPU with robustness on can pick differently. */
export function deviceKey(gpu: Gpu): string {
  let k = keys.get(gpu);
  if (k === undefined) {
    const a = gpu.kind;
    k = `${a.description || a.device || a.vendor}|${a.architecture}|${a.runtime}|robust=${a.robustness}`;
    keys.set(gpu, k);
  }
  return k;
}

/** The measured winner for a problem key on this device, if tuning has run (or a table was loaded). */
export function tuned(gpu: Gpu, key: string): string | undefined {
  return gpu.tuning.get(key)?.winner;
}

/**
 * Times `runOne` for every candidate (recording its work into a fresh recorder, submitting and
 * waiting for the GPU) and returns the fastest; later calls with the same device and key return
 * the cached winner without timing. The candidates' work must be correct before it is timed.
 */
export async function tune<C extends string>(
  gpu: Gpu,
  key: string,
  candidates: readonly C[],
  runOne: (candidate: C, rec: Recorder) => void,
  opts: TuneOptions = {},
): Promise<C> {
  if (!candidates.length) throw new Error(`tune("${key}"): no candidates`);
  const hit = gpu.tuning.get(key);
  if (hit && candidates.includes(hit.winner as C)) return hit.winner as C;
  let running = inflight.get(gpu);
  if (!running) inflight.set(gpu, (running = new Map()));
  let p = running.get(key);
  if (!p) {
    p = measure(gpu, key, candidates, runOne, opts).finally(() => running.delete(key));
    running.set(key, p);
  }
  return (await p) as C;
}

async function measure<C extends string>(
  gpu: Gpu,
  key: string,
  candidates: readonly C[],
  runOne: (candidate: C, rec: Recorder) => void,
  opts: TuneOptions,
): Promise<C> {
  const { warmup = 1, minReps = 3, minMs = 30, maxReps = 20, minSubmitMs = 0, ordered = false } = opts;
  let copies = 1;
  const once = async (c: C) => {
    const rec = gpu.recorder();
    try {
      for (let i = 0; i < copies; i++) runOne(c, rec);
    } catch (e) {
      rec.abandon(); // or the pool would hold every later release for it
      throw e;
    }
    const t0 = performance.now();
    await rec.submit();
    await gpu.sync();
    return (performance.now() - t0) / copies;
  };
  if (minSubmitMs > 0) {
    // Calls per submit, from the first candidate that runs (a failing one is reported in the round below).
    for (const c of candidates) {
      try {
        await once(c); // compiles its pipelines
        const t = await once(c);
        copies = Math.max(1, Math.min(MAX_COPIES, Math.ceil(minSubmitMs / Math.max(t, 1e-3))));
        break;
      } catch {
        continue;
      }
    }
  }
  // First round, in order: a warm-up and one timing each. A candidate HOPELESS times slower than the best so far is
  // ranked by that timing alone (the slow ones cost most on CPU devices); an ordered search stops there.
  // A candidate that fails here (a variant this device cannot compile or run) is left out, with a warning: loading a
  // model must not fail over one of its layout choices. Only when every candidate fails does tuning throw.
  const times = new Map<C, number[]>();
  let best = Infinity;
  let firstError: unknown;
  for (const c of candidates) {
    let t: number;
    try {
      for (let i = 0; i < warmup; i++) await once(c);
      t = await once(c);
    } catch (e) {
      firstError ??= e;
      console.warn(`webart: tuning ${key}: "${c}" failed on this device and is left out: ${(e as Error).message}`);
      continue;
    }
    times.set(c, [t]);
    if (t > HOPELESS * best && ordered) break;
    best = Math.min(best, t);
  }
  if (!times.size) throw firstError;
  // Then rounds that alternate between the contenders, so a change in machine load hits them alike.
  const contenders = [...times.keys()].filter((c) => times.get(c)![0] <= HOPELESS * best);
  const more = (c: C) => {
    const ts = times.get(c)!;
    return (ts.length < minReps || ts.reduce((x, y) => x + y, 0) < minMs) && ts.length < maxReps;
  };
  while (contenders.some(more)) {
    for (const c of contenders.filter(more)) times.get(c)!.push(await once(c));
  }
  const ms: Record<string, number> = {};
  for (const [c, ts] of times) ms[c] = [...ts].sort((x, y) => x - y)[Math.floor(ts.length / 2)];
  const winner = [...times.keys()].reduce((w, c) => (ms[c] < ms[w] ? c : w));
  gpu.tuning.set(key, { winner, ms });
  return winner;
}

/** A copy of this device's tuning results, keyed for persisting (device key + "|" + problem key). */
export function tuneTable(gpu: Gpu): TuneTable {
  const dk = deviceKey(gpu);
  return Object.fromEntries([...gpu.tuning].map(([k, v]) => [`${dk}|${k}`, { winner: v.winner, ms: { ...v.ms } }]));
}

/** Loads persisted results into this device: entries measured on another device (or settings) are skipped.
 *  Returns how many were loaded. */
export function loadTuneTable(gpu: Gpu, t: TuneTable): number {
  const prefix = `${deviceKey(gpu)}|`;
  let n = 0;
  for (const [k, v] of Object.entries(t)) {
    if (typeof v?.winner !== "string") throw new Error(`loadTuneTable: entry "${k}" has no winner`);
    if (!k.startsWith(prefix)) continue;
    gpu.tuning.set(k.slice(prefix.length), { winner: v.winner, ms: { ...(v.ms ?? {}) } });
    n++;
  }
  return n;
}
