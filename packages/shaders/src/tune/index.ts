// Per-device kernel variant choice by measurement: times each candidate once per device and
// problem key, caches the winner in memory, and exposes the table so it can be persisted.
import type { Gpu, Recorder } from "@webart/gpu";

export interface TuneEntry {
  winner: string;
  /** Median ms per candidate, as measured. */
  ms: Record<string, number>;
}

/** Full key (device key + "|" + problem key) → entry. */
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

const table = new Map<string, TuneEntry>();
/** A candidate whose first timing is this many times the best first timing is not timed again. */
const HOPELESS = 3;
/** At most this many calls in one timed submit. */
const MAX_COPIES = 64;
const inflight = new Map<string, Promise<string>>();

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

/** The cached winner for a problem key on this device, if tuning has run. */
export function tuned(gpu: Gpu, key: string): string | undefined {
  return table.get(`${deviceKey(gpu)}|${key}`)?.winner;
}

/** The tuned winner for `key` when it is one of `choices` (a loaded table may hold anything), else `fallback`. */
export function tunedChoice<C extends string>(gpu: Gpu, key: string, choices: readonly C[], fallback: C): C {
  const w = tuned(gpu, key);
  return w !== undefined && choices.includes(w as C) ? (w as C) : fallback;
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
  const full = `${deviceKey(gpu)}|${key}`;
  const hit = table.get(full);
  if (hit && candidates.includes(hit.winner as C)) return hit.winner as C;
  let p = inflight.get(full);
  if (!p) {
    p = measure(gpu, full, candidates, runOne, opts).finally(() => inflight.delete(full));
    inflight.set(full, p);
  }
  return (await p) as C;
}

async function measure<C extends string>(
  gpu: Gpu,
  full: string,
  candidates: readonly C[],
  runOne: (candidate: C, rec: Recorder) => void,
  opts: TuneOptions,
): Promise<C> {
  const { warmup = 1, minReps = 3, minMs = 30, maxReps = 20, minSubmitMs = 0, ordered = false } = opts;
  let copies = 1;
  const once = async (c: C) => {
    const rec = gpu.recorder();
    for (let i = 0; i < copies; i++) runOne(c, rec);
    const t0 = performance.now();
    await rec.submit();
    await gpu.sync();
    return (performance.now() - t0) / copies;
  };
  if (minSubmitMs > 0) {
    await once(candidates[0]); // compiles its pipelines
    const t = await once(candidates[0]);
    copies = Math.max(1, Math.min(MAX_COPIES, Math.ceil(minSubmitMs / Math.max(t, 1e-3))));
  }
  // First round, in order: a warm-up and one timing each. A candidate HOPELESS times slower than the best so far is
  // ranked by that timing alone (the slow ones cost most on CPU devices); an ordered search stops there.
  const times = new Map<C, number[]>();
  let best = Infinity;
  for (const c of candidates) {
    for (let i = 0; i < warmup; i++) await once(c);
    const t = await once(c);
    times.set(c, [t]);
    if (t > HOPELESS * best && ordered) break;
    best = Math.min(best, t);
  }
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
  table.set(full, { winner, ms });
  return winner;
}

/** A copy of every tuning result so far (to persist, e.g. as JSON). */
export function tuneTable(): TuneTable {
  return Object.fromEntries([...table].map(([k, v]) => [k, { winner: v.winner, ms: { ...v.ms } }]));
}

/** Loads persisted results; entries for other devices are kept but never match this one. */
export function loadTuneTable(t: TuneTable): void {
  for (const [k, v] of Object.entries(t)) {
    if (typeof v?.winner !== "string") throw new Error(`loadTuneTable: entry "${k}" has no winner`);
    table.set(k, { winner: v.winner, ms: { ...(v.ms ?? {}) } });
  }
}

export function clearTuneTable(): void {
  table.clear();
}
