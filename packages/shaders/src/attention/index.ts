// Causal grouped-query attention dispatches: forward over a KV cache (prefill, training, and decode with split-KV
// plus its reduce) and the FlashAttention-2 backward in the training layout; tile sizes chosen per head dim,
// group size and the device's workgroup memory. Shapes: N tokens, H heads, KV kv-heads (H % KV == 0), D head dim
// (even, <= 256), S slots x Tmax rows of cache; training: B sequences of T tokens, token i <-> (i / T, i % T).
import { kernelSpec, Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forwardMain from "./forward.wgsl";
import passes from "./passes.wgsl";
import reduceCode from "./reduce.wgsl";
import dqCode from "./backward.wgsl";
import dkvCode from "./backward_dkv.wgsl";
import rowsForwardCode from "./rows_forward.wgsl";
import rowsDqCode from "./rows_backward.wgsl";
import rowsDkvCode from "./rows_backward_dkv.wgsl";
import lanesForwardMain from "./lanes_forward.wgsl";
import lanesDqMain from "./lanes_backward.wgsl";
import lanesDkvMain from "./lanes_backward_dkv.wgsl";
import lanesDecodeCode from "./lanes_decode.wgsl";
import lanes from "./lanes.wgsl";
import lanesKv from "./lanes_kv.wgsl";
import { isCpuDevice } from "@webart/gpu";

/** The kernels with the parts they share: passes over a block's tokens (forward), sums across lanes (lanes), the
 *  K/V tile of the lanes forward and dq (lanesKv). */
const forwardCode = forwardMain + passes;
const lanesForwardCode = lanesForwardMain + passes + lanes + lanesKv;
const lanesDqCode = lanesDqMain + lanes + lanesKv;
const lanesDkvCode = lanesDkvMain + lanes;

/**
 * "tiled": K/V tiles shared through workgroup memory (FlashAttention-style), for GPUs. "rows": one thread per
 * query row (forward, dq) or key row (dk, dv), no workgroup memory and no barriers, for CPU devices, where
 * barriers are costly and each thread's loop over keys stays in the cache. "lanes", for GPUs with subgroups: a few
 * lanes of a subgroup per row, its q (or k and v) and sums in registers, scores summed across the lanes by subgroup
 * shuffles; in training and prefill the other side's tiles are shared through workgroup memory, in decode more lanes
 * split a token's keys and their partial softmaxes merge by shuffles (no workgroup memory, no barriers).
 */
export type AttentionVariant = "tiled" | "rows" | "lanes";
export const ATTENTION_VARIANTS: readonly AttentionVariant[] = ["tiled", "rows", "lanes"];
/** Where attention runs: training and prefill (many query tokens a sequence), or decode (one a sequence). */
export type AttentionUse = "train" | "decode";
/** What start-up tuning times for each use: the rows family, and the tiled one with either tile profile (key
 * `attention.<use>` ranks the rows family against the tiled one at the device kind's profile; where tiled wins,
 * `attention.<use>.tiles` ranks the two profiles). */
export const ATTENTION_TUNE = ["rows", "tiled-cpu", "tiled-gpu", "lanes"] as const;
export type AttentionTuneCandidate = (typeof ATTENTION_TUNE)[number];

/** What start-up tuning (tune/kernels.ts) chooses for attention, per use: the family and the tiled kernels' profile. */
export type AttentionTuning = Partial<Record<AttentionUse, { variant: AttentionVariant; profile: TileProfile }>>;

/** The family for this use: as tuned, else rows on CPU devices (measured faster on SwiftShader) and tiled
 * elsewhere; tiled where the tuned family cannot run this D (rows: D a multiple of 4; lanes: see lanesWidth). */
export function attentionVariant(
  gpu: Gpu,
  d = 4,
  use: AttentionUse = "train",
  tuning?: AttentionTuning,
): AttentionVariant {
  if (d % 4 !== 0) return "tiled";
  const v = tuning?.[use]?.variant ?? (isCpuDevice(gpu) ? "rows" : "tiled");
  return v === "lanes" && lanesWidth(gpu, d) === undefined ? "tiled" : v;
}
/** The rows variant reads rows as vec4. */
function rowsCheck(d: number): void {
  if (d % 4 !== 0) throw new Error(`attention: the "rows" variant needs D % 4 == 0; got D=${d} (use "tiled")`);
}
/** Threads per workgroup of the rows kernels: SwiftShader spreads workgroups over its threads, so decode's few rows
 * (B x H) need small workgroups to use every core. */
const ROWS_WG = 16;

/** The rows forward at head dim d (it runs every decode step on CPU devices). */
const rowsForwardSpec = (d: number): KernelSpec =>
  kernelSpec("attention_forward_rows", rowsForwardCode, { D: d, WG: ROWS_WG });

/** Per-thread accumulator capacity in vec4 (ACC in the WGSL). */
const ACC = 4;

/** A workgroup's share of the work: bq query tokens x gh heads (a divisor of H / KV) as rows, bk keys per tile. */
export interface Tiles {
  bq: number;
  gh: number;
  bk: number;
  wg: number;
}
export type TileKind = "forward" | "decode" | "dq" | "dkv";

/** Workgroup-memory bytes of a kernel with these tiles (mirrors the var<workgroup> declarations: rows of D as
 *  ceil(D / 4) vec4, K/V rows padded by one vec4). */
export function tileBytes(kind: TileKind, t: Tiles, d: number): number {
  const r = t.bq * t.gh;
  const d4 = Math.ceil(d / 4);
  const kvRows = 16 * t.bk * (d4 + 1);
  if (kind === "forward" || kind === "decode") return 16 * r * d4 + kvRows + 4 * (r * t.bk + 3 * r + 2 * t.bq + 2);
  if (kind === "dq") return 32 * r * d4 + 2 * kvRows + 4 * (r * t.bk + 2 * r);
  return 2 * kvRows + 32 * r * d4 + 4 * (2 * r * t.bk + 2 * r);
}

/** vec4 accumulators per thread (dq/forward: rows x D; dkv: keys x D). */
const accPerThread = (kind: TileKind, t: Tiles, d: number) =>
  Math.ceil(((kind === "dkv" ? t.bk : t.bq * t.gh) * Math.ceil(d / 4)) / t.wg);

function check(gpu: Gpu, kind: TileKind, t: Tiles, d: number, g: number): void {
  const { maxComputeInvocationsPerWorkgroup: maxWg, maxComputeWorkgroupStorageSize: maxBytes } = gpu.limits;
  const problems = [
    g % t.gh !== 0 && `gh ${t.gh} does not divide H / KV = ${g}`,
    (t.bq < 1 || t.bq > 32 || t.bk < 1 || t.wg < t.bq) && "need 1 <= bq <= 32, bq <= wg and bk >= 1",
    accPerThread(kind, t, d) > ACC && `each thread would accumulate ${accPerThread(kind, t, d)} vec4 (max ${ACC})`,
    t.wg > maxWg && `wg ${t.wg} exceeds maxComputeInvocationsPerWorkgroup ${maxWg}`,
    tileBytes(kind, t, d) > maxBytes &&
      `${tileBytes(kind, t, d)} bytes of workgroup memory exceed the device's ${maxBytes}`,
  ].filter(Boolean);
  if (problems.length)
    throw new Error(`attention ${kind} tiles ${JSON.stringify(t)} at D=${d}: ${problems.join("; ")}`);
}

/**
 * "gpu": workgroup memory is fast, so big shared tiles (about 16 query rows, all heads of a kv group when they fit,
 * 16-64 keys) and threads enough for ~2 vec4 accumulators each. "cpu" (SwiftShader, a JIT without unrolling):
 * fewer, busier threads (64, up to 4 vec4 each) amortise its costly barriers, and small tiles, since Dawn's
 * zero-init of workgroup memory makes pipeline creation there take ~0.1-0.2 s per KiB of it.
 */
export type TileProfile = "gpu" | "cpu";

/** The tiled family's profile for this use: as tuned, else by the device's kind (where rows won, tiles serve only an
 * explicit split-KV decode). */
export function tileProfile(gpu: Gpu, use: AttentionUse = "train", tuning?: AttentionTuning): TileProfile {
  return tuning?.[use]?.profile ?? (isCpuDevice(gpu) ? "cpu" : "gpu");
}

/** Default rows (query tokens x heads) and keys per tile. */
function defaults(kind: TileKind, d: number, profile: TileProfile): { rows: number; keys: number } {
  if (profile === "cpu")
    // Measured on SwiftShader with workgroup zero-init off (the engine's Node default): larger tiles are
    // faster for a training step than the 4x8 / 8x16 tiles needed when Dawn zero-fills workgroup memory.
    return { rows: 16, keys: 32 };
  if (kind === "decode") return { rows: 16, keys: d <= 64 ? 64 : 32 };
  return { rows: 16, keys: kind === "dkv" || d > 64 ? 16 : 32 };
}

/** Default tiles for a kernel (or `over` where given), shrunk until they fit the device's workgroup memory. */
export function chooseTiles(
  gpu: Gpu,
  kind: TileKind,
  d: number,
  g: number,
  over: Partial<Tiles> = {},
  profile = tileProfile(gpu, kind === "decode" ? "decode" : "train"),
): Tiles {
  // Every decode step of every layer asks again: the answer is kept per device (a failed choice throws each time).
  const key = `${kind}|${d}|${g}|${over.bq}|${over.gh}|${over.bk}|${over.wg}|${profile}`;
  let memo = chosen.get(gpu);
  if (!memo) chosen.set(gpu, (memo = new Map()));
  let t = memo.get(key);
  if (!t) memo.set(key, (t = Object.freeze(pickTiles(gpu, kind, d, g, over, profile))));
  return t;
}
const chosen = new WeakMap<Gpu, Map<string, Tiles>>();

/** The divisors of g: the head counts a workgroup can take of a kv-head's g heads. */
const divisorsOf = (g: number) => [...Array(g).keys()].map((i) => i + 1).filter((x) => g % x === 0);

function pickTiles(gpu: Gpu, kind: TileKind, d: number, g: number, over: Partial<Tiles>, profile: TileProfile): Tiles {
  const { rows, keys } = defaults(kind, d, profile);
  const divisors = divisorsOf(g);
  const gh = over.gh ?? Math.max(...divisors.filter((x) => x <= rows));
  const t: Tiles = {
    gh,
    bq: over.bq ?? (kind === "decode" ? 1 : Math.min(32, Math.max(1, Math.floor(rows / gh)))),
    bk: over.bk ?? keys,
    wg: 0,
  };
  const maxWg = Math.min(gpu.limits.maxComputeInvocationsPerWorkgroup, 256);
  const vec4s = () => (kind === "dkv" ? t.bk : t.bq * t.gh) * Math.ceil(d / 4); // accumulated per workgroup
  const perThread = profile === "cpu" ? ACC : 2;
  const threads = () => over.wg ?? Math.min(maxWg, Math.max(64, 2 ** Math.ceil(Math.log2(vec4s() / perThread))));
  t.wg = threads();
  const fits = () =>
    tileBytes(kind, t, d) <= gpu.limits.maxComputeWorkgroupStorageSize && accPerThread(kind, t, d) <= ACC;
  while (!fits()) {
    if (over.bk === undefined && t.bk > 8) t.bk /= 2;
    else if (over.bq === undefined && t.bq > 1) t.bq = Math.ceil(t.bq / 2);
    else if (over.gh === undefined && t.gh > 1) t.gh = Math.max(...divisors.filter((x) => x < t.gh));
    else break; // check() reports what does not fit
    t.wg = threads();
  }
  check(gpu, kind, t, d, g);
  return t;
}

/**
 * Lanes per row of the "lanes" kernels at head dim d: a power of two dividing D / 4, at most the device's smallest
 * subgroup, so that each lane holds about 4 vec4 of a row (at most 16); undefined where the device has no subgroups
 * (or does not say their size) or D is not a multiple of 4.
 */
export function lanesWidth(gpu: Gpu, d: number): number | undefined {
  const most = gpu.subgroupMinSize;
  if (!gpu.features.has("subgroups") || !most || d % 4 !== 0 || d > 256) return undefined;
  const d4 = d / 4;
  let p = 1;
  while (p * 2 <= most && d4 % (p * 2) === 0 && d4 / p > 4) p *= 2;
  return d4 / p <= LANES_MAXNV ? p : undefined;
}
/** Capacities of the lanes kernels' private arrays (MAXNV, MAXBK in the WGSL). */
const LANES_MAXNV = 16;
const LANES_MAXBK = 64;

/** A lanes kernel's geometry: p lanes per row; forward and dq: bq tokens x gh heads a workgroup, bk keys a tile;
 *  dkv: bk keys a workgroup, bq tokens x gh heads a tile, its rows split over qg groups of lanes. */
export interface LanesTiles {
  p: number;
  bq: number;
  gh: number;
  bk: number;
  /** dkv only (default 1). */
  qg?: number;
}
export type LanesKind = "forward" | "dq" | "dkv";

/** Threads and workgroup-memory bytes of a lanes kernel (mirrors the var<workgroup> declarations). */
export function lanesSize(kind: LanesKind, t: LanesTiles, d: number): { wg: number; bytes: number } {
  const d4 = d / 4;
  if (kind === "dkv") {
    const qg = t.qg ?? 1;
    const red = qg > 1 ? 2 * 16 * t.bk * d4 : 16;
    return { wg: t.bk * t.p * qg, bytes: 2 * 16 * t.bq * t.gh * d4 + 8 * t.bq * t.gh + red };
  }
  return { wg: t.bq * t.gh * t.p, bytes: 2 * 16 * t.bk * d4 + (kind === "forward" ? 8 * t.bq + 12 : 0) };
}

/** Workgroup memory a lanes kernel's tiles aim for, leaving room for several workgroups an SM. */
const LANES_BYTES = 16384;

/**
 * The lanes kernels' geometry for head dim d and g = H / KV heads a kv-head (or `over` where given): rows of all
 * heads of a group that fit 256 threads; forward and dq: as many tokens as fill 256 threads, K/V tiles of ~16 KiB;
 * dkv: 4 groups of lanes over as many keys as fill 256 threads, query tiles of ~16 KiB. Shrunk to fit the device's
 * workgroup memory; throws where the device cannot run it, saying why.
 */
export function lanesTiles(
  gpu: Gpu,
  kind: LanesKind,
  d: number,
  g: number,
  over: Partial<LanesTiles> = {},
): LanesTiles {
  const key = `${kind}|${d}|${g}|${over.p}|${over.bq}|${over.gh}|${over.bk}|${over.qg}`;
  return geometry(gpu, key, () => pickLanesTiles(gpu, kind, d, g, over));
}

/** A geometry worked out once per device and key: every step of every layer asks again (a failed one throws each
 *  time). */
function geometry<T extends object>(gpu: Gpu, key: string, pick: () => T): T {
  let memo = lanesChosen.get(gpu);
  if (!memo) lanesChosen.set(gpu, (memo = new Map()));
  let t = memo.get(key) as T | undefined;
  if (!t) memo.set(key, (t = Object.freeze(pick())));
  return t;
}
const lanesChosen = new WeakMap<Gpu, Map<string, object>>();

function pickLanesTiles(gpu: Gpu, kind: LanesKind, d: number, g: number, over: Partial<LanesTiles>): LanesTiles {
  const p = over.p ?? lanesWidth(gpu, d);
  const what = `attention "lanes" ${kind} ${JSON.stringify(over)} at D=${d}`;
  if (p === undefined)
    throw new Error(`${what}: the device needs subgroups of a known size, and D a multiple of 4 up to 256`);
  const { maxComputeInvocationsPerWorkgroup: maxWg, maxComputeWorkgroupStorageSize: maxBytes } = gpu.limits;
  const threads = Math.min(maxWg, 256);
  const d4 = d / 4;
  const divisors = divisorsOf(g);
  let t: LanesTiles;
  if (kind === "dkv") {
    const perToken = (gh: number) => gh * (32 * d4 + 8); // q and do rows, lse and Di
    const qg = over.qg ?? Math.max(1, Math.min(4, Math.floor(threads / p)));
    const gh = over.gh ?? Math.max(...divisors.filter((x) => perToken(x) <= LANES_BYTES), 1);
    t = {
      p,
      qg,
      gh,
      bk: over.bk ?? Math.max(1, Math.floor(threads / (p * qg))),
      bq: over.bq ?? Math.max(1, Math.min(32, Math.floor(LANES_BYTES / perToken(gh)))),
    };
    while (lanesSize(kind, t, d).bytes > maxBytes) {
      if (over.bq === undefined && t.bq > 1) t.bq = Math.ceil(t.bq / 2);
      else if (over.bk === undefined && t.bk > 1) t.bk = Math.ceil(t.bk / 2);
      else break; // reported below
    }
  } else {
    const gh = over.gh ?? Math.max(...divisors.filter((x) => x * p <= threads), 1);
    const bq = over.bq ?? Math.max(1, Math.min(32, Math.floor(threads / (gh * p))));
    let bk = over.bk ?? Math.min(LANES_MAXBK, Math.max(8, 2 ** Math.floor(Math.log2(LANES_BYTES / (32 * d4)))));
    while (over.bk === undefined && bk > 1 && lanesSize(kind, { p, bq, gh, bk }, d).bytes > maxBytes) bk /= 2;
    t = { p, bq, gh, bk };
  }
  const { wg, bytes } = lanesSize(kind, t, d);
  const problems = [
    (p & (p - 1)) !== 0 && `lanes ${p} must be a power of two`,
    gpu.subgroupMinSize > 0 &&
      p > gpu.subgroupMinSize &&
      `lanes ${p} exceed the device's smallest subgroup (${gpu.subgroupMinSize})`,
    (d % (4 * p) !== 0 || d / 4 / p > LANES_MAXNV) &&
      `D=${d} must be a multiple of 4 x lanes with at most ${LANES_MAXNV} vec4 a lane`,
    g % t.gh !== 0 && `gh ${t.gh} does not divide H / KV = ${g}`,
    (t.bq < 1 || t.bq > 32 || t.bk < 1 || !((t.qg ?? 1) >= 1)) && "need 1 <= bq <= 32, bk >= 1 and qg >= 1",
    kind !== "dkv" && t.qg !== undefined && t.qg !== 1 && "qg applies to dkv only",
    kind !== "dkv" && t.bk > LANES_MAXBK && `bk ${t.bk} exceeds ${LANES_MAXBK}`,
    wg > maxWg && `${wg} threads exceed maxComputeInvocationsPerWorkgroup ${maxWg}`,
    bytes > maxBytes && `${bytes} bytes of workgroup memory exceed the device's ${maxBytes}`,
  ].filter(Boolean);
  if (problems.length) throw new Error(`${what}: ${problems.join("; ")}`);
  return t;
}

/** The lanes decode kernel's geometry: per head, s lanes split the keys and p split each row (s x p lanes of one
 *  subgroup); gh heads a workgroup. */
export interface DecodeLanes {
  p: number;
  s: number;
  gh: number;
}

/**
 * The lanes decode kernel's geometry for head dim d and g = H / KV (or `over` where given): rows split over up to 4
 * lanes (at most 16 vec4 a lane), keys over as many lanes as fill the device's smallest subgroup (at most 8), as
 * many heads of a group as fit 256 threads. Throws where the device cannot run it, saying why.
 */
export function decodeLanes(gpu: Gpu, d: number, g: number, over: Partial<DecodeLanes> = {}): DecodeLanes {
  const key = `decode|${d}|${g}|${over.p}|${over.s}|${over.gh}`;
  return geometry(gpu, key, () => pickDecodeLanes(gpu, d, g, over));
}

function pickDecodeLanes(gpu: Gpu, d: number, g: number, over: Partial<DecodeLanes>): DecodeLanes {
  const width = lanesWidth(gpu, d);
  const what = `attention "lanes" decode ${JSON.stringify(over)} at D=${d}`;
  const sg = gpu.subgroupMinSize;
  if (width === undefined && over.p === undefined)
    throw new Error(`${what}: the device needs subgroups of a known size, and D a multiple of 4 up to 256`);
  const p = over.p ?? Math.min(width!, 4);
  const s = over.s ?? Math.max(1, Math.min(8, Math.floor(sg / p)));
  const threads = Math.min(gpu.limits.maxComputeInvocationsPerWorkgroup, 256);
  const divisors = divisorsOf(g);
  const gh = over.gh ?? Math.max(...divisors.filter((x) => x * s * p <= threads), 1);
  const pow2 = (x: number) => x >= 1 && (x & (x - 1)) === 0;
  const problems = [
    (!pow2(p) || !pow2(s)) && `lanes ${p} and ${s} must be powers of two`,
    !(sg > 0 && s * p <= sg) && `a head's ${s} x ${p} lanes exceed the device's smallest subgroup (${sg || "unknown"})`,
    (d % (4 * p) !== 0 || d / 4 / p > LANES_MAXNV) &&
      `D=${d} must be a multiple of 4 x lanes with at most ${LANES_MAXNV} vec4 a lane`,
    g % gh !== 0 && `gh ${gh} does not divide H / KV = ${g}`,
    gh * s * p > gpu.limits.maxComputeInvocationsPerWorkgroup &&
      `${gh * s * p} threads exceed maxComputeInvocationsPerWorkgroup ${gpu.limits.maxComputeInvocationsPerWorkgroup}`,
  ].filter(Boolean);
  if (problems.length) throw new Error(`${what}: ${problems.join("; ")}`);
  return { p, s, gh };
}

const lanesOverrides = (t: LanesTiles, d: number) => ({
  D: d,
  BQ: t.bq,
  GH: t.gh,
  BK: t.bk,
  P: t.p,
  ...(t.qg !== undefined ? { QG: t.qg } : {}),
});

function dimsCheck(h: number, kv: number, d: number): void {
  if (h % kv !== 0 || d % 2 !== 0 || d > 256 || d < 2) {
    throw new Error(`attention: need H % KV == 0 and an even D <= 256; got H=${h} KV=${kv} D=${d}`);
  }
}

export interface AttentionDims {
  /** N query tokens (rows of q). */
  n: number;
  h: number;
  kv: number;
  d: number;
  /** S slots and Tmax rows per slot of k/v (training: B and T). */
  slots: number;
  tmax: number;
  /** Softmax scale; default 1/sqrt(D). */
  scale?: number;
  /** Sliding window: token pos sees keys pos - window + 1..pos only (Gemma 3's local layers, Mistral); default none. */
  window?: number;
}

/** The window as the kernels take it: a u32, 2^32 - 1 for none. */
function windowParam(window: number | undefined): number {
  if (window === undefined) return 0xffffffff;
  if (!Number.isInteger(window) || window < 1 || window > 0xffffffff)
    throw new Error(`attention: window ${window} must be a positive integer`);
  return window;
}

export interface AttentionBuffers {
  q: GPUBuffer; // (N, H, D)
  slotPos: GPUBuffer; // (N, 2) u32
  k: GPUBuffer; // (S, Tmax, KV, D)
  v: GPUBuffer; // (S, Tmax, KV, D)
  o: GPUBuffer; // (N, H, D) out
  lse: GPUBuffer; // (N, H) out, for the backward
}

export interface ForwardOptions {
  /** Key-range chunks processed by separate workgroups and combined by attention_reduce (default 1). */
  split?: number;
  /** Keys per chunk when split > 1; default ceil(maxLen / split) rounded up to the key tile. */
  chunk?: number;
  /** Upper bound on any token's pos + 1 (used to size chunks); default Tmax. */
  maxLen?: number;
  tiles?: Partial<Tiles>;
  /** "decode" tiles: one query token per workgroup, longer key tiles. Default "forward". */
  kind?: "forward" | "decode";
  /** Kernel family for a forward without split (split-KV is always tiled); default attentionVariant(gpu), but
   * tiled with kind "decode" (attentionDecode chooses rows itself). */
  variant?: AttentionVariant;
  /** Tile profile of the tiled kernels; default tileProfile(gpu) for the use. */
  profile?: TileProfile;
  /** Start-up tuning's choices, used where `variant` and `profile` are not given. */
  tuning?: AttentionTuning;
  /** The lanes variant's geometry (default lanesTiles'). */
  lanes?: Partial<LanesTiles>;
}

const forwardSpec = (t: Tiles, d: number, split: boolean): KernelSpec =>
  kernelSpec(
    split ? "attention_forward_split" : "attention_forward",
    forwardCode,
    { D: d, BQ: t.bq, GH: t.gh, BK: t.bk, WG: t.wg, SPLIT: split ? 1 : 0 },
    "attention_forward",
  );

/**
 * o, lse = causal attention of each token (slot, pos) over cache rows 0..pos of its slot. Tokens with a slot or
 * pos out of range get o = 0, lse = 0. Returns the tiles and split used.
 */
export function attentionForward(
  gpu: Gpu,
  rec: Recorder,
  bufs: AttentionBuffers,
  dims: AttentionDims,
  opts: ForwardOptions = {},
): { tiles: Tiles; split: number } {
  const { n, h, kv, d, slots, tmax, scale = 1 / Math.sqrt(d) } = dims;
  dimsCheck(h, kv, d);
  const window = windowParam(dims.window);
  const kind = opts.kind ?? "forward";
  const tiles = chooseTiles(
    gpu,
    kind,
    d,
    h / kv,
    opts.tiles,
    opts.profile ?? tileProfile(gpu, kind === "decode" ? "decode" : "train", opts.tuning),
  );
  const split = Math.max(1, Math.floor(opts.split ?? 1));
  const maxLen = Math.min(opts.maxLen ?? tmax, tmax);
  const chunk = opts.chunk ?? Math.ceil(Math.ceil(maxLen / split) / tiles.bk) * tiles.bk;
  const params = new Params().u32(n, h, kv, slots, tmax, split, chunk).f32(scale).u32(window);
  const { q, slotPos, k, v, o, lse } = bufs;
  const variant = opts.variant ?? (opts.kind === "decode" ? "tiled" : attentionVariant(gpu, d, "train", opts.tuning));
  if (split === 1 && variant === "rows") {
    rowsCheck(d);
    rec.dispatch(rowsForwardSpec(d), [q, slotPos, k, v, o, lse], gpu.grid(Math.ceil((n * h) / ROWS_WG)), params);
    return { tiles, split };
  }
  // The tiled and lanes kernels index workgroups in x only.
  const tooMany = (blocks: number) => {
    if (blocks > gpu.limits.maxComputeWorkgroupsPerDimension)
      throw new Error(
        `attention: ${n} tokens need more than ${gpu.limits.maxComputeWorkgroupsPerDimension} workgroups; run fewer per dispatch`,
      );
  };
  if (split === 1 && variant === "lanes") {
    const t = lanesTiles(gpu, "forward", d, h / kv, opts.lanes);
    tooMany(Math.ceil(n / t.bq));
    const spec = kernelSpec("attention_forward_lanes", lanesForwardCode, lanesOverrides(t, d));
    rec.dispatch(spec, [q, slotPos, k, v, o, lse], [Math.ceil(n / t.bq), h / t.gh, 1], params);
    return { tiles, split };
  }
  const grid: [number, number, number] = [Math.ceil(n / tiles.bq), h / tiles.gh, split];
  tooMany(grid[0]);
  if (split === 1) {
    rec.dispatch(forwardSpec(tiles, d, false), [q, slotPos, k, v, o, lse], grid, params);
    return { tiles, split };
  }
  splitKv(gpu, rec, { n, h, d, split, o, lse }, (part, ml) =>
    rec.dispatch(forwardSpec(tiles, d, true), [q, slotPos, k, v, part, ml], grid, params),
  );
  return { tiles, split };
}

/** Split-KV: `partials` records the chunks' unnormalised outputs and their max and sum into the buffers it is given,
 *  then attention_reduce combines them into o and lse. */
function splitKv(
  gpu: Gpu,
  rec: Recorder,
  { n, h, d, split, o, lse }: { n: number; h: number; d: number; split: number; o: GPUBuffer; lse: GPUBuffer },
  partials: (part: GPUBuffer, ml: GPUBuffer) => void,
): void {
  const part = gpu.buffer(split * n * h * d * 4, "activations", "attention partials");
  const ml = gpu.buffer(split * n * h * 2 * 4, "activations", "attention partial max/sum");
  partials(part, ml);
  const wg = 256;
  const reduce = kernelSpec("attention_reduce", reduceCode, { D: d, WG: wg });
  rec.dispatch(reduce, [part, ml, o, lse], gpu.grid(Math.ceil((n * h * d) / wg)), new Params().u32(n * h, split));
  gpu.release(part, ml); // reusable only after this recorder is submitted
}

/**
 * Split count for decode: enough workgroups (`target`) to fill the GPU, but chunks of at least `minChunk` keys so
 * the partials stay small next to the K/V reads. `groups` = workgroups without splitting (B x KV for decode).
 */
export function decodeSplit(maxLen: number, groups: number, opts: { target?: number; minChunk?: number } = {}): number {
  const { target = 128, minChunk = 64 } = opts;
  return Math.max(1, Math.min(Math.ceil(target / Math.max(1, groups)), Math.floor(maxLen / minChunk)));
}

/** Workgroups that keep the device busy: a real GPU's many cores, or SwiftShader's few CPU threads. */
const decodeTarget = (profile: TileProfile) => (profile === "cpu" ? 4 : 128);

/** Workgroups a decode step's split-KV fills at most on this device with this tuning (0: its decode kernel does not
 *  split), for the memory plan's count of the partials. */
export function decodeSplitTarget(gpu: Gpu, d: number, tuning?: AttentionTuning): number {
  const variant = attentionVariant(gpu, d, "decode", tuning);
  if (variant === "rows") return 0;
  return variant === "lanes" ? 128 : decodeTarget(tileProfile(gpu, "decode", tuning));
}

/**
 * Decode: one query token per sequence (q (B, H, D), slotPos (B, 2)), sequences of different lengths in one
 * dispatch; all H / KV heads of a kv-head share its K/V reads; split-KV chosen from `maxLen` (the longest
 * pos + 1 in the batch) unless `split` is given.
 */
export function attentionDecode(
  gpu: Gpu,
  rec: Recorder,
  bufs: AttentionBuffers,
  dims: AttentionDims & { maxLen: number },
  opts: {
    split?: number;
    chunk?: number;
    tiles?: Partial<Tiles>;
    variant?: AttentionVariant;
    profile?: TileProfile;
    tuning?: AttentionTuning;
    /** The lanes decode kernel's geometry (default decodeLanes'). */
    lanes?: Partial<DecodeLanes>;
  } = {},
): { tiles: Tiles; split: number } {
  // The rows kernel decodes too (no split), faster than the tiled one on CPU devices (`npm run bench -- kernels`:
  // attention.decode.*.rows against .tiled); so does the lanes one.
  const variant = opts.variant ?? attentionVariant(gpu, dims.d, "decode", opts.tuning);
  if (variant === "rows" && (opts.split ?? 1) === 1) {
    return attentionForward(gpu, rec, bufs, dims, { variant: "rows", maxLen: dims.maxLen });
  }
  if (variant === "lanes") {
    // Split-KV as the tiled kernel chooses it (enough workgroups to fill a GPU, chunks of at least 64 keys).
    const { n, h, kv, d, slots, tmax, maxLen, scale = 1 / Math.sqrt(d) } = dims;
    dimsCheck(h, kv, d);
    const t = decodeLanes(gpu, d, h / kv, opts.lanes);
    if (n > gpu.limits.maxComputeWorkgroupsPerDimension)
      throw new Error(`attention: ${n} decode rows exceed ${gpu.limits.maxComputeWorkgroupsPerDimension} workgroups`);
    const split = Math.max(1, Math.floor(opts.split ?? decodeSplit(maxLen, n * (h / t.gh))));
    const chunk = opts.chunk ?? Math.ceil(Math.min(maxLen, tmax) / split);
    const params = new Params().u32(n, h, kv, slots, tmax, split, chunk).f32(scale).u32(windowParam(dims.window));
    const ov = { D: d, GH: t.gh, S: t.s, P: t.p, SPLIT: split > 1 ? 1 : 0 };
    const spec = kernelSpec(
      split > 1 ? "attention_decode_lanes_split" : "attention_decode_lanes",
      lanesDecodeCode,
      ov,
      "attention_decode_lanes",
    );
    const { q, slotPos, k, v, o, lse } = bufs;
    const grid: [number, number, number] = [n, h / t.gh, split];
    if (split === 1) rec.dispatch(spec, [q, slotPos, k, v, o, lse], grid, params);
    else
      splitKv(gpu, rec, { n, h, d, split, o, lse }, (part, ml) =>
        rec.dispatch(spec, [q, slotPos, k, v, part, ml], grid, params),
      );
    const profile = tileProfile(gpu, "decode", opts.tuning);
    return { tiles: chooseTiles(gpu, "decode", d, h / kv, opts.tiles, profile), split };
  }
  const profile = opts.profile ?? tileProfile(gpu, "decode", opts.tuning);
  const tiles = chooseTiles(gpu, "decode", dims.d, dims.h / dims.kv, opts.tiles, profile);
  const target = decodeTarget(profile);
  const split = opts.split ?? decodeSplit(dims.maxLen, dims.n * (dims.h / tiles.gh), { target });
  return attentionForward(gpu, rec, bufs, dims, {
    ...opts,
    kind: "decode",
    tiles,
    split,
    maxLen: dims.maxLen,
    profile,
  });
}

/** The (slot, pos) buffer of the training layout: token i of B sequences of T <-> (i / T, i % T). */
export function trainingSlotPos(b: number, t: number): Uint32Array {
  const a = new Uint32Array(2 * b * t);
  for (let i = 0; i < b * t; i++) {
    a[2 * i] = Math.floor(i / t);
    a[2 * i + 1] = i % t;
  }
  return a;
}

export interface BackwardDims {
  b: number;
  t: number;
  h: number;
  kv: number;
  d: number;
  scale?: number;
  /** Sliding window, as in AttentionDims. */
  window?: number;
}

export interface BackwardBuffers {
  q: GPUBuffer; // (B*T, H, D)
  k: GPUBuffer; // (B, T, KV, D)
  v: GPUBuffer; // (B, T, KV, D)
  o: GPUBuffer; // (B*T, H, D) from the forward
  lse: GPUBuffer; // (B*T, H) from the forward
  dout: GPUBuffer; // (B*T, H, D)
  dq: GPUBuffer; // (B*T, H, D) out
  dk: GPUBuffer; // (B, T, KV, D) out
  dv: GPUBuffer; // (B, T, KV, D) out
}

/** dq, dk, dv of causal attention in the training layout (two dispatches: query side, then key side). */
export function attentionBackward(
  gpu: Gpu,
  rec: Recorder,
  bufs: BackwardBuffers,
  dims: BackwardDims,
  opts: {
    dqTiles?: Partial<Tiles>;
    dkvTiles?: Partial<Tiles>;
    variant?: AttentionVariant;
    profile?: TileProfile;
    tuning?: AttentionTuning;
    /** The lanes variant's geometry per kernel (default lanesTiles'). */
    lanes?: { dq?: Partial<LanesTiles>; dkv?: Partial<LanesTiles> };
  } = {},
): { dq: Tiles; dkv: Tiles } {
  const { b, t, h, kv, d, scale = 1 / Math.sqrt(d) } = dims;
  dimsCheck(h, kv, d);
  const g = h / kv;
  const profile = opts.profile ?? tileProfile(gpu, "train", opts.tuning);
  const tq = chooseTiles(gpu, "dq", d, g, opts.dqTiles, profile);
  const tk = chooseTiles(gpu, "dkv", d, g, opts.dkvTiles, profile);
  const params = new Params().u32(b, t, h, kv).f32(scale).u32(windowParam(dims.window));
  const { q, k, v, o, lse, dout, dq, dk, dv } = bufs;
  const variant = opts.variant ?? attentionVariant(gpu, d, "train", opts.tuning);
  const rows = variant === "rows";
  if (rows) rowsCheck(d);
  const lq = variant === "lanes" ? lanesTiles(gpu, "dq", d, g, opts.lanes?.dq) : undefined;
  const lk = variant === "lanes" ? lanesTiles(gpu, "dkv", d, g, opts.lanes?.dkv) : undefined;
  const maxWgs = gpu.limits.maxComputeWorkgroupsPerDimension;
  const blocks =
    lq && lk ? Math.max(Math.ceil(t / lq.bq), Math.ceil(t / lk.bk)) : Math.ceil(t / Math.min(tq.bq, tk.bk));
  if (!rows && b * blocks > maxWgs) {
    throw new Error(
      `attention backward: B=${b} x T=${t} needs more than ${maxWgs} workgroups; use smaller micro-batches`,
    );
  }
  const delta = gpu.buffer(b * t * h * 4, "activations", "attention delta");
  if (lq && lk) {
    const dqSpec = kernelSpec("attention_backward_dq_lanes", lanesDqCode, lanesOverrides(lq, d));
    const dkvSpec = kernelSpec("attention_backward_dkv_lanes", lanesDkvCode, lanesOverrides(lk, d));
    rec.dispatch(dqSpec, [q, k, v, o, dout, lse, dq, delta], [b * Math.ceil(t / lq.bq), h / lq.gh], params);
    rec.dispatch(dkvSpec, [q, k, v, dout, lse, delta, dk, dv], [b * Math.ceil(t / lk.bk), kv], params);
    gpu.release(delta);
    return { dq: tq, dkv: tk };
  }
  if (rows) {
    const ov = { D: d, WG: ROWS_WG };
    const dqRows = kernelSpec("attention_backward_dq_rows", rowsDqCode, ov);
    const dkvRows = kernelSpec("attention_backward_dkv_rows", rowsDkvCode, ov);
    rec.dispatch(dqRows, [q, k, v, o, dout, lse, dq, delta], gpu.grid(Math.ceil((b * t * h) / ROWS_WG)), params);
    rec.dispatch(dkvRows, [q, k, v, dout, lse, delta, dk, dv], gpu.grid(Math.ceil((b * t * kv) / ROWS_WG)), params);
    gpu.release(delta);
    return { dq: tq, dkv: tk };
  }
  const ov = (x: Tiles) => ({ D: d, BQ: x.bq, GH: x.gh, BK: x.bk, WG: x.wg });
  const dqSpec = kernelSpec("attention_backward_dq", dqCode, ov(tq));
  const dkvSpec = kernelSpec("attention_backward_dkv", dkvCode, ov(tk));
  rec.dispatch(dqSpec, [q, k, v, o, dout, lse, dq, delta], [b * Math.ceil(t / tq.bq), h / tq.gh], params);
  rec.dispatch(dkvSpec, [q, k, v, dout, lse, delta, dk, dv], [b * Math.ceil(t / tk.bk), kv], params);
  gpu.release(delta);
  return { dq: tq, dkv: tk };
}
