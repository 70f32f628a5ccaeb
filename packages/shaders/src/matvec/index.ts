// Decode matvec y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for M = 1..64 rows, W in f32, packed bf16/f16, or 4-bit q4
// (quant/reference.ts; the stream variant only): memory-bound, so W is streamed once per call (larger M: use
// matmul). What decode runs around a projection can ride along in the same dispatch: the RMSNorm of x, several
// weights side by side (q, k, v), each one's LoRA term, the gated activation of gate and up, and the residual add.
import { isCpuDevice, Params, sizeOf, type Gpu, type KernelSpec, type Recorder, Rng, packHalf } from "@webart/gpu";
import type { WeightDtype } from "../matmul/index.ts";
import type { GatedActivation } from "../swiglu/index.ts";
import { Q4_GROUP } from "../quant/reference.ts";
import { tune, type TuneOptions } from "../tune/index.ts";
import cosSin from "../rope/cossin.wgsl";
import columns from "./columns.wgsl";
import common from "./common.wgsl";
import forward from "./forward.wgsl";
import half4 from "./half4.wgsl";
import q4 from "./q4.wgsl";
import q4None from "./q4_none.wgsl";
import rope from "./rope.wgsl";
import ropeNone from "./rope_none.wgsl";
import stream from "./stream.wgsl";
import subgroup from "./subgroup.wgsl";

/** W's dtype in a matvec: matmul's, or q4 (4-bit, quant/reference.ts: nibbles in `w`, bf16 scales in `scales`). */
export type MatvecDtype = WeightDtype | "q4";

export interface MatvecBuffers {
  x: GPUBuffer; // (M, ldx)
  /** W (N, K), f32, packed 16-bit, or q4's nibbles (8 a u32). */
  w: GPUBuffer;
  /** q4 only (required): the scales of W's groups of 32 elements, bf16 two a u32, over the same element offsets. */
  scales?: GPUBuffer;
  y: GPUBuffer; // (M, ldy) out
  /** [N] f32 added to every row. */
  bias?: GPUBuffer;
  /** (K): RMSNorm folded into the read of x: each row of x is taken as x·rstd·norm, rstd over its K elements. */
  norm?: GPUBuffer;
  /** The LoRA terms' inputs: t (M, ldt) holds each segment's x·Aᵀ at its `tCol`; B is read from `loraParams`. */
  loraT?: GPUBuffer;
  loraParams?: GPUBuffer;
  /** With options.rope: each row's (slot, pos) (M, 2) u32, RoPE's inverse frequencies (D/2), and the layer's K and V
   *  caches (S, Tmax, KV, D). */
  rope?: { slotPos: GPUBuffer; invFreq: GPUBuffer; kc: GPUBuffer; vc: GPUBuffer };
}

export interface MatvecDims {
  M: number;
  N: number;
  K: number;
}

/** What start-up tuning (tune/kernels.ts) chooses for the matvec: a variant per weight dtype, and on GPUs one per
 *  problem the model decodes (`shapes`, keyed by matvecShapeKey: its projections differ 170-fold in size). */
export type MatvecTuning = Partial<Record<WeightDtype, MatvecVariant>> & {
  shapes?: Map<number, MatvecVariant>;
  /** Problems of more rows than this run the columns variant, whatever the choices above (start-up tuning found it
   *  faster for a layer's MLP at the next row count it measured: tuneDecodeRows); none: problems keep those. */
  columnsAbove?: number;
};

/** A problem's key in MatvecTuning.shapes: its dtype, outputs N (gated: of each half), K and whether it is gated. */
export function matvecShapeKey(wDtype: MatvecDtype, N: number, K: number, gated: boolean): number {
  return ((N * 2 + (gated ? 1 : 0)) * 4 + W_KIND[wDtype]) * 2 ** 20 + K;
}

export interface MatvecOptions {
  /** q4 runs the stream variant whatever `variant` and `tuning` say: K and W's offsets must be multiples of 32 (one
   *  group a 16-byte vector), x's rows start on 16 bytes (q4Streamable); it throws otherwise. */
  wDtype?: MatvecDtype;
  /** Row strides of x and y in elements (defaults K and N); ldy > N with offsetY writes a column range. */
  ldx?: number;
  ldy?: number;
  /** Element offsets (W's counts 16-bit elements when packed, so a shard may start mid-word; q4 elements, nibbles,
   *  for q4). */
  offsetX?: number;
  offsetW?: number;
  offsetY?: number;
  offsetBias?: number;
  /** Force a variant; otherwise the tuned one, else subgroup where available. */
  variant?: MatvecVariant;
  tuning?: MatvecTuning;
  /** y += x·Wᵀ (the residual add) instead of y =. */
  accumulate?: boolean;
  /** The folded RMSNorm's epsilon (required with buffers.norm). */
  eps?: number;
  /**
   * W's rows in up to 3 segments, each at its own element offset (offsetW is then unused), their outputs side by
   * side in y in this order (N = the sum of their rows); each with its bias offset and LoRA term. With `gated`:
   * exactly 2 segments of N rows each, and y (M, N) = act(segment 0) · segment 1.
   */
  segments?: MatvecSegment[];
  gated?: GatedActivation;
  /** Row stride of buffers.loraT (required with it). */
  ldt?: number;
  /**
   * Workgroups that split the rows of x for each run of output columns (the grid's z; default 1, at most one per pass
   * of the variant's rows): each reads W once per pass it runs. For a small W (LoRA's t = x·Aᵀ) that is no cost, and
   * many rows over few columns then spread over more workgroups.
   */
  rowBlocks?: number;
  /**
   * The q|k|v projection with what follows it (ropeQkv, without per-head q/k norms) in its epilogue: the 3 segments
   * are q (H·D rows), k and v (KV·D each); q is rotated and written to y (M, H·D), k rotated and v copied into the
   * caches at each row's (slot, pos) (buffers.rope); a row outside the caches writes q only. Needs 11 storage
   * buffers a dispatch, 12 with q4 W (matvecRopeFits).
   */
  rope?: { heads: number; kvHeads: number; headDim: number; slots: number; tmax: number };
}

/** Storage buffers a matvec with RoPE binds (q4 W: one more, its scales). */
const ROPE_STORAGE_BUFFERS = 11;
function ropeStorageBuffers(wDtype: MatvecDtype): number {
  return ROPE_STORAGE_BUFFERS + (wDtype === "q4" ? 1 : 0);
}

/** Whether this device can run the matvec with RoPE on W of this dtype (its storage buffers a dispatch). */
export function matvecRopeFits(gpu: Gpu, wDtype: MatvecDtype = "f32"): boolean {
  return gpu.limits.maxStorageBuffersPerShaderStage >= ropeStorageBuffers(wDtype);
}

/**
 * The columns between the two of a RoPE pair in a variant's runs (its ROPE_P), or 0 where it cannot pair them: a
 * run must hold whole pairs of one head, so D/2 must be a multiple of it. workgroup: runs of 4 columns; subgroup and
 * columns: 16;
 * stream: the workgroup's 256 / T. q4 W runs the stream variant whatever `variant` is, so its pairs are stream's.
 */
export function matvecRopePairs(variant: MatvecVariant, wDtype: MatvecDtype, K: number, headDim: number): number {
  const run =
    variant === "stream" || wDtype === "q4"
      ? STREAM_WG / streamThreads(wDtype, K)
      : variant === "subgroup" || variant === "columns"
        ? 16
        : 4;
  const P = run / 2;
  return P >= 1 && Number.isInteger(P) && (headDim / 2) % P === 0 ? P : 0;
}

/** Rows of W at one offset, their bias, and optionally their LoRA term y += scale · t[:, tCol : tCol + rank] · Bᵀ. */
export interface MatvecSegment {
  rows: number;
  /** Element offset of the first row (16-bit elements when packed, 4-bit ones for q4). */
  offsetW: number;
  /** Element offset of the first row's bias in `bias`. */
  offsetBias?: number;
  /** B (rows, rank) at element `b` of the adapter buffer. */
  lora?: { rank: number; scale: number; b: number; tCol: number };
}

const W_KIND: Record<MatvecDtype, number> = { f32: 0, bf16: 1, f16: 2, q4: 3 };
export const MATVEC_VARIANTS = ["subgroup", "workgroup", "stream", "columns"] as const;
/** subgroup: lanes split K and subgroupAdd reduces, no barriers (needs the subgroups feature);
 * workgroup: threads split K and reduce through workgroup memory (works everywhere);
 * stream: 16-byte loads of W, four in flight a thread, 32-256 threads a column by K, for GPUs' bandwidth (works everywhere;
 * on a problem whose rows of W do not start on 16 bytes, the workgroup variant runs instead); the only one for q4 W;
 * columns: a lane a column, up to 32 rows of x a pass, for decode steps of many rows (works everywhere;
 * needs the same 16-byte rows as stream). */
export type MatvecVariant = (typeof MATVEC_VARIANTS)[number];
/** Threads per workgroup; the subgroup variant's workgroup owns CG groups of 16 columns, the workgroup one 4 (the
 * stream one: 256 / T columns of T threads each, T from streamThreads). */
const WG: Record<Exclude<MatvecVariant, "stream" | "columns">, number> = { subgroup: 16, workgroup: 64 };
const CG = 4;
/** The stream variant's workgroup: STREAM_WG threads, T to a column. */
const STREAM_WG = 256;

/**
 * Threads a column in the stream variant (a power of two, 32 to 256; the workgroup owns 256 / T columns): enough
 * that each thread has about four of the row's 16-byte vectors, the four it loads at once. So a long K (the MLP's
 * down projection, K = 4864 in Qwen2.5-0.5B: T = 256) spreads over more threads than a short one (K = 896: T = 32).
 * A q4 vector holds 32 elements: K / 32 vectors a row.
 */
export function streamThreads(wDtype: MatvecDtype, K: number): number {
  const vectors = Math.ceil(K / vectorElements(wDtype));
  // q4 rows are a quarter as many vectors as 16-bit ones: at 32 threads a column, most of a thread's four loads at
  // K = 896 would be clamped repeats whose unpacking is wasted (on SwiftShader the q4 matvec ran at a tenth of the
  // f16 copy's speed), so q4 goes down to 8 threads a column (32 columns a workgroup).
  const least = wDtype === "q4" ? 8 : 32;
  return Math.min(STREAM_WG, Math.max(least, 2 ** Math.ceil(Math.log2(vectors / 4))));
}
/** Elements in one of the stream variant's 16-byte vectors of W (q4: one group). */
function vectorElements(wDtype: MatvecDtype): number {
  return wDtype === "f32" ? 4 : wDtype === "q4" ? Q4_GROUP : 8;
}
/** Rows of x per pass (threads keep MT × 4 sums in the workgroup variant, MT × 16 in the subgroup one, MT × 2
 * vectors in the stream one). */
const MAX_MT: Record<MatvecVariant, number> = { subgroup: 8, workgroup: 4, stream: 4, columns: 32 };
/** The columns variant's workgroup: 16 slices of K by COLUMNS_CW columns, whose sums meet in COLUMNS_KQ slots
 *  (columns.wgsl's KS, CW and KQ). */
const COLUMNS_CW = 16;
const COLUMNS_KQ = 4;

/** Workgroup memory of the columns variant at MT rows a pass: the slots of the slices' sums (gate and up with GATE),
 *  and of their x² sums (columns.wgsl's red and redSq): 8.5 KiB at 32 rows, 16.5 KiB gated. */
function columnsBytes(MT: number, gated: boolean): number {
  return columnsRed(MT, gated) * 4 + COLUMNS_KQ * 32 * 4;
}
function columnsRed(MT: number, gated: boolean): number {
  return COLUMNS_KQ * COLUMNS_CW * MT * (gated ? 2 : 1);
}

/** Rows of x a pass a variant takes at most (the columns variant: what the device's workgroup memory holds). */
function maxRows(gpu: Gpu, variant: MatvecVariant, gated: boolean): number {
  let MT = MAX_MT[variant];
  if (variant !== "columns") return MT;
  while (MT > 1 && columnsBytes(MT, gated) > gpu.limits.maxComputeWorkgroupStorageSize) MT /= 2;
  return MT;
}
const GATE: Record<GatedActivation, number> = { silu: 1, gelu_tanh: 2 };
const specs = new Map<number, KernelSpec>();
const VARIANT_KIND: Record<MatvecVariant, number> = { subgroup: 0, workgroup: 1, stream: 2, columns: 3 };

/** A variant's kernel; `T` is the stream variant's threads a column (streamThreads). q4 W: the stream variant only. */
export function matvecSpec(
  variant: MatvecVariant,
  wDtype: MatvecDtype,
  MT: number,
  norm = false,
  gated?: GatedActivation,
  T = 32,
  ropeP = 0,
): KernelSpec {
  // A number, not a string: a decode step looks up ~100 of these. W_KIND takes 4 values (q4: 3).
  const key =
    (((((VARIANT_KIND[variant] * 4 + W_KIND[wDtype]) * 64 + MT) * 2 + (norm ? 1 : 0)) * 3 + (gated ? GATE[gated] : 0)) *
      512 +
      (variant === "stream" ? T : 0)) *
      256 +
    ropeP;
  let s = specs.get(key);
  if (!s) {
    if (wDtype === "q4" && variant !== "stream")
      throw new Error(`matvec: q4 W runs the stream variant only (not ${variant})`);
    const o = {
      W_KIND: W_KIND[wDtype],
      MT,
      NORM: norm ? 1 : 0,
      GATE: gated ? GATE[gated] : 0,
      ...(ropeP ? { ROPE_P: ropeP } : {}),
    };
    const tail = common + (ropeP ? rope + cosSin : ropeNone);
    s =
      variant === "stream"
        ? {
            name: "matvec_forward_stream",
            code: stream + half4 + (wDtype === "q4" ? q4Scales(ropeP > 0) : q4None) + tail,
            overrides: { ...o, T, G: STREAM_WG / T },
          }
        : variant === "subgroup"
          ? { name: "matvec_forward_subgroup", code: subgroup + tail, overrides: { ...o, WG: WG.subgroup, CG } }
          : variant === "columns"
            ? {
                name: "matvec_forward_columns",
                code: columns + half4 + tail,
                overrides: { ...o, RED: columnsRed(MT, !!gated) },
              }
            : { name: "matvec_forward", code: forward + tail, overrides: { ...o, WG: WG.workgroup } };
    specs.set(key, s);
  }
  return s;
}

/** q4.wgsl, its scales bound after RoPE's 4 buffers (binding 12) when the kernel has RoPE's epilogue. */
function q4Scales(rope: boolean): string {
  const [from, to] = [
    "@group(0) @binding(8) var<storage, read> scales",
    "@group(0) @binding(12) var<storage, read> scales",
  ];
  if (!q4.includes(from)) throw new Error(`matvec: q4.wgsl no longer declares "${from}"`);
  return rope ? q4.replace(from, to) : q4;
}

/** Whether the stream variant can run a problem: every row of W starts on 16 bytes (8 halves or 4 floats; for q4,
 *  32 elements, one group), and so does every row of x (its offset and stride in floats, multiples of 4). */
export function streamable(
  wDtype: MatvecDtype,
  K: number,
  offsetsW: number[],
  x: { offset: number; ld: number } = { offset: 0, ld: K },
): boolean {
  const e = vectorElements(wDtype);
  return K % e === 0 && offsetsW.every((o) => o % e === 0) && x.offset % 4 === 0 && x.ld % 4 === 0;
}

/** Whether matvec() can run a q4 problem (it has only the stream variant): K and every offset of W multiples of 32,
 *  x's offset and stride multiples of 4. Where not, the caller dequantizes W (q4Dequant) and runs the f16 matvec. */
export function q4Streamable(
  K: number,
  offsetsW: number[],
  x: { offset: number; ld: number } = { offset: 0, ld: K },
): boolean {
  return streamable("q4", K, offsetsW, x);
}

/** The variants this device can run. */
export function matvecVariants(gpu: Gpu): MatvecVariant[] {
  return MATVEC_VARIANTS.filter((v) => v !== "subgroup" || gpu.features.has("subgroups"));
}

/** The variant matvec() uses: stream for q4 W (its only one); else columns past tuning's columnsAbove rows, else
 *  tuned for this problem (`shape`, a matvecShapeKey), else for this dtype, else subgroup when the device has it. */
export function matvecVariant(
  gpu: Gpu,
  wDtype: MatvecDtype = "f32",
  tuning?: MatvecTuning,
  shape?: number,
  M = 1,
): MatvecVariant {
  if (wDtype === "q4") return "stream";
  if (tuning?.columnsAbove !== undefined && M > tuning.columnsAbove) return "columns";
  const t = (shape !== undefined && tuning?.shapes?.get(shape)) || tuning?.[wDtype];
  const subgroups = gpu.features.has("subgroups");
  if (t && t in MAX_MT && (t !== "subgroup" || subgroups)) return t;
  return subgroups ? "subgroup" : "workgroup";
}

/** The variants tuneMatvec weighs at one row: the columns variant is for many (tuneDecodeRows weighs it). */
function oneRowVariants(gpu: Gpu): MatvecVariant[] {
  return matvecVariants(gpu).filter((v) => v !== "columns");
}

/** A problem to tune on its own: N outputs (gated: of each half, over 2N rows of W) from K. */
export interface MatvecShape {
  N: number;
  K: number;
  gated?: boolean;
}

/** Times the available variants (but columns) on a (1, K) × (K, N) problem per dtype and keeps the winners with the device, under
 * keys like "matvec.bf16@1024x4096"; then each of `shapes` at batch 1 per dtype ("matvec.bf16@896x4864",
 * "...@4864x896.gated"). Returns them as matvec's tuning. */
export async function tuneMatvec(
  gpu: Gpu,
  dtypes: WeightDtype[] = ["f32"],
  [N, K] = [1024, 4096],
  opts: TuneOptions = {},
  shapes: MatvecShape[] = [],
): Promise<MatvecTuning> {
  const rng = new Rng(2);
  const values = rng.f32(N * K);
  const [x, y] = [gpu.upload(values.subarray(0, K), "tune"), gpu.buffer(N * 4, "tune")];
  const out: MatvecTuning = {};
  try {
    for (const wDtype of dtypes) {
      const w = gpu.upload(wDtype === "f32" ? values : packHalf(values, wDtype), "tune");
      try {
        out[wDtype] = await tune(
          gpu,
          `matvec.${wDtype}@${N}x${K}`,
          // The stream variant is for GPUs' memory: on a CPU device it ran 2-3x slower than workgroup (`npm run
          // bench -- gpu --quick`), so tuning there does not spend time on it.
          oneRowVariants(gpu).filter((v) => v !== "stream" || !isCpuDevice(gpu)),
          (variant, rec) => matvec(gpu, rec, { x, w, y }, { M: 1, N, K }, { wDtype, variant }),
          opts,
        );
      } finally {
        gpu.release(w);
      }
    }
  } finally {
    gpu.release(x, y);
  }
  for (const wDtype of shapes.length ? dtypes : []) {
    const found = await tuneShapes(gpu, wDtype, shapes, opts);
    out.shapes = new Map([...(out.shapes ?? []), ...found]);
  }
  return out;
}

/** The most of W a per-problem measurement uploads (start-up tuning keeps its other problems' weights within it). */
export const TUNE_BYTES = 64 * 2 ** 20;

async function tuneShapes(
  gpu: Gpu,
  wDtype: WeightDtype,
  shapes: MatvecShape[],
  opts: TuneOptions,
): Promise<Map<number, MatvecVariant>> {
  const out = new Map<number, MatvecVariant>();
  const bytes = wDtype === "f32" ? 4 : 2;
  for (const { N, K, gated = false } of shapes) {
    // The time a variant takes does not depend on the values, so W is the pool's zeroed buffer (no host copy), and a
    // large W (the LM head, 270 MB in Qwen2.5-0.5B) is measured on its first TUNE_BYTES of rows.
    const halves = gated ? 2 : 1;
    const n = Math.max(1, Math.min(N, Math.floor(TUNE_BYTES / (halves * K * bytes))));
    const w = gpu.buffer(Math.ceil((halves * n * K * bytes) / 4) * 4, "tune");
    const [x, y] = [gpu.buffer(K * 4, "tune"), gpu.buffer(n * 4, "tune")];
    const segments = gated ? [0, n * K].map((offsetW) => ({ rows: n, offsetW })) : undefined;
    try {
      out.set(
        matvecShapeKey(wDtype, N, K, gated),
        await tune(
          gpu,
          `matvec.${wDtype}@${N}x${K}${gated ? ".gated" : ""}`,
          oneRowVariants(gpu),
          (variant, rec) =>
            matvec(
              gpu,
              rec,
              { x, w, y },
              { M: 1, N: n, K },
              { wDtype, variant, segments, gated: gated ? "silu" : undefined },
            ),
          opts,
        ),
      );
    } finally {
      gpu.release(w, x, y);
    }
  }
  return out;
}

/** Records y (=|+=) [norm](x)·Wᵀ (+ bias) (+ LoRA) [gated]. Checks every access against the buffers' sizes first.
 * Returns the variant that runs it. */
export function matvec(
  gpu: Gpu,
  rec: Recorder,
  b: MatvecBuffers,
  dims: MatvecDims,
  o: MatvecOptions = {},
): MatvecVariant {
  const { x, w, y, bias, norm } = b;
  const { M, K } = dims;
  const { wDtype = "f32" } = o;
  const segs: MatvecSegment[] = o.segments ?? [
    { rows: dims.N, offsetW: o.offsetW ?? 0, offsetBias: o.offsetBias ?? 0 },
  ];
  if (segs.length < 1 || segs.length > 3) throw new Error(`matvec: ${segs.length} segments (1 to 3)`);
  if (o.gated && (segs.length !== 2 || segs[0].rows !== segs[1].rows))
    throw new Error("matvec: gated needs 2 segments of equal rows (gate, up)");
  const N = o.gated ? segs[0].rows : segs.reduce((a, s) => a + s.rows, 0);
  if (dims.N !== N) throw new Error(`matvec: N = ${dims.N} but the segments give ${N} output columns`);
  positive("M", M);
  positive("N", N);
  positive("K", K);
  for (let i = 0; i < segs.length; i++) positive(`rows${i}`, segs[i].rows);
  if (!(wDtype in W_KIND)) throw new Error(`matvec: wDtype "${wDtype}" is not supported (f32, bf16, f16, q4)`);
  const isQ4 = wDtype === "q4";
  const ldx = o.ldx ?? K;
  const rp = o.rope;
  const yCols = rp ? rp.heads * rp.headDim : N;
  const ldy = o.ldy ?? yCols;
  const [offX, offY] = [o.offsetX ?? 0, o.offsetY ?? 0];
  if (isQ4) checkQ4(b, K, segs, !!o.segments, offX, ldx);
  else if (b.scales) throw new Error(`matvec: buffers.scales is for q4 W (wDtype is ${wDtype})`);
  check("x", -1, x, 4, offX, M, ldx, K);
  check("y", -1, y, 4, offY, M, ldy, yCols);
  if (!!rp !== !!b.rope) throw new Error("matvec: RoPE needs both options.rope and buffers.rope");
  if (rp && b.rope) checkRope(gpu, rp, b.rope, segs, M, !!o.gated || !!o.accumulate, wDtype);
  if (norm) {
    check("norm weight", -1, norm, 4, 0, 1, K, K);
    if (o.eps === undefined) throw new Error("matvec: a norm weight needs options.eps");
  }
  if (b.loraT && (!b.loraParams || o.ldt === undefined))
    throw new Error("matvec: buffers.loraT needs buffers.loraParams and options.ldt");
  const lora = b.loraT && { t: b.loraT, params: b.loraParams!, ldt: o.ldt! };
  for (let i = 0; i < segs.length; i++) {
    const s = segs[i];
    const seg = o.segments ? i : -1;
    check("W", seg, w, wDtype === "f32" ? 4 : isQ4 ? 0.5 : 2, s.offsetW, s.rows, K, K);
    // q4Bytes's scales: a bf16 (2 bytes) a group of 32 elements.
    if (isQ4) check("scales", seg, b.scales!, 2 / Q4_GROUP, s.offsetW, s.rows, K, K);
    if (bias) check("bias", seg, bias, 4, s.offsetBias ?? 0, 1, s.rows, s.rows);
    const l = s.lora;
    if (!l) continue;
    if (!lora) throw new Error(`matvec: segment ${i} has a LoRA term but no lora inputs were given`);
    if (!(Number.isInteger(l.rank) && l.rank >= 1)) throw new Error(`matvec: LoRA rank ${l.rank} must be >= 1`);
    check("LoRA t", i, lora.t, 4, l.tCol, M, lora.ldt, l.rank);
    check("LoRA B", i, lora.params, 4, l.b, 1, s.rows * l.rank, s.rows * l.rank);
  }
  const outs = [y, b.rope?.kc, b.rope?.vc].filter((u) => u !== undefined);
  const ins = [x, w, bias, norm, lora?.t, lora?.params, b.rope?.slotPos, b.rope?.invFreq, b.scales];
  if (outs.some((u, i) => ins.includes(u) || outs.indexOf(u) !== i))
    throw new Error("matvec: y (and the KV caches) must not alias each other or any input");
  const shape = !isQ4 && o.tuning?.shapes ? matvecShapeKey(wDtype, N, K, !!o.gated) : undefined;
  let variant = isQ4 ? "stream" : (o.variant ?? matvecVariant(gpu, wDtype, o.tuning, shape, M));
  if (!(variant in MAX_MT) || (variant === "subgroup" && !gpu.features.has("subgroups"))) {
    throw new Error(`matvec: variant "${variant}" is not available here (${matvecVariants(gpu).join(", ")})`);
  }
  if (
    (variant === "stream" || variant === "columns") &&
    !streamable(
      wDtype,
      K,
      segs.map((s) => s.offsetW),
      { offset: offX, ld: ldx },
    )
  )
    variant = "workgroup";
  let ropeP = 0;
  if (rp) {
    ropeP = matvecRopePairs(variant, wDtype, K, rp.headDim);
    if (!ropeP && isQ4) {
      const G = STREAM_WG / streamThreads(wDtype, K);
      const need =
        G < 2 ? "at least 2 to pair RoPE's columns" : `RoPE needs D/2 (${rp.headDim / 2}) to be a multiple of ${G / 2}`;
      throw new Error(
        `matvec: q4 W runs the stream variant, whose workgroups own ${G} columns at K = ${K}: ${need} ` +
          "(check matvecRopePairs first)",
      );
    }
    if (!ropeP) variant = "workgroup";
    ropeP = matvecRopePairs(variant, wDtype, K, rp.headDim);
    if (!ropeP) throw new Error(`matvec: RoPE needs D/2 (${rp.headDim / 2}) to be even`);
  }
  // Powers of two only, so a decode batch that shrinks row by row reuses a few pipelines. Row blocks each take their
  // share of the rows in passes of MT.
  if (o.rowBlocks !== undefined) positive("rowBlocks", o.rowBlocks);
  const blockRows = Math.ceil(M / Math.min(o.rowBlocks ?? 1, M));
  const MT = Math.min(2 ** Math.ceil(Math.log2(blockRows)), maxRows(gpu, variant, !!o.gated));
  const flags = (bias ? 1 : 0) | (o.accumulate ? 2 : 0);
  const params = new Params()
    .u32(M, N, K, flags, ldx, ldy, offY, offX, lora?.ldt ?? 0)
    .f32(norm ? o.eps! : 0)
    .u32(0, 0);
  let base = 0;
  for (let i = 0; i < 3; i++) {
    const s = segs[i];
    if (!s) {
      params.u32(0, 0, 0, 0, 0, 0).f32(0).u32(0xffffffff);
      continue;
    }
    const l = s.lora;
    params
      .u32(s.rows, s.offsetW, s.offsetBias ?? 0, l?.rank ?? 0, l?.b ?? 0, l?.tCol ?? 0)
      .f32(l?.scale ?? 0)
      .u32(o.gated ? 0 : base);
    base += s.rows;
  }
  params.u32(rp ? rp.headDim / 2 : 0, rp?.slots ?? 0, rp?.tmax ?? 0, 0);
  // Output columns per workgroup: 4 (or 2 gated) in the workgroup variant, CG groups of 16 (or 8) in the subgroup
  // one, 256 / T in the stream one, 16 in the columns one.
  const T = variant === "stream" ? streamThreads(wDtype, K) : 0;
  const perGroup = T
    ? STREAM_WG / T
    : variant === "columns"
      ? COLUMNS_CW
      : (variant === "subgroup" ? 16 * CG : 4) / (o.gated ? 2 : 1);
  // Unused inputs are bound to x (never read; all are read-only storage).
  const bindings = [x, w, bias ?? x, norm ?? x, lora?.t ?? x, lora?.params ?? x, y];
  if (b.rope) bindings.push(b.rope.slotPos, b.rope.invFreq, b.rope.kc, b.rope.vc);
  if (isQ4) bindings.push(b.scales!); // binding 8, or 12 after RoPE's (q4Scales)
  const grid = gpu.grid(Math.ceil(N / perGroup));
  if (o.rowBlocks !== undefined) grid[2] = Math.min(o.rowBlocks, Math.ceil(M / MT));
  rec.dispatch(matvecSpec(variant, wDtype, MT, !!norm, o.gated, T, ropeP), bindings, grid, params);
  return variant;
}

/** The checks of a matvec with RoPE: its segments are q, k and v of whole heads; the buffers fit. */
function checkRope(
  gpu: Gpu,
  rp: NonNullable<MatvecOptions["rope"]>,
  rb: NonNullable<MatvecBuffers["rope"]>,
  segs: MatvecSegment[],
  M: number,
  gatedOrAccumulate: boolean,
  wDtype: MatvecDtype,
): void {
  const { heads: H, kvHeads: KV, headDim: D, slots, tmax } = rp;
  positive("rope.heads", H);
  positive("rope.kvHeads", KV);
  positive("rope.headDim", D);
  positive("rope.slots", slots);
  positive("rope.tmax", tmax);
  if (D % 2 !== 0) throw new Error(`matvec: RoPE needs an even head dim (${D})`);
  if (gatedOrAccumulate) throw new Error("matvec: RoPE is for the q|k|v projection: not gated, not accumulating");
  if (segs.length !== 3 || segs[0].rows !== H * D || segs[1].rows !== KV * D || segs[2].rows !== KV * D) {
    const rows = segs.map((s) => s.rows).join(", ");
    throw new Error(`matvec: RoPE needs segments q, k, v of ${H * D}, ${KV * D}, ${KV * D} rows (got ${rows})`);
  }
  if (!matvecRopeFits(gpu, wDtype))
    throw new Error(
      `matvec: RoPE binds ${ropeStorageBuffers(wDtype)} storage buffers (${wDtype} W); this device allows ` +
        `${gpu.limits.maxStorageBuffersPerShaderStage} (check matvecRopeFits first)`,
    );
  check("slotPos", -1, rb.slotPos, 4, 0, 1, 2 * M, 2 * M);
  check("invFreq", -1, rb.invFreq, 4, 0, 1, D / 2, D / 2);
  const cache = slots * tmax * KV * D;
  check("k cache", -1, rb.kc, 4, 0, 1, cache, cache);
  check("v cache", -1, rb.vc, 4, 0, 1, cache, cache);
}

/** The checks of a q4 matvec beyond the buffers' sizes: its scales are given, and the stream variant can run it. */
function checkQ4(
  b: MatvecBuffers,
  K: number,
  segs: MatvecSegment[],
  segmented: boolean,
  offX: number,
  ldx: number,
): void {
  if (!b.scales) throw new Error("matvec: q4 W needs buffers.scales (its groups' bf16 scales)");
  const offsets = segs.map((s) => s.offsetW);
  if (q4Streamable(K, offsets, { offset: offX, ld: ldx })) return;
  const how = "(check q4Streamable first; otherwise dequantize W to f16)";
  if (K % Q4_GROUP !== 0)
    throw new Error(`matvec: q4 W needs K (${K}) to be a multiple of ${Q4_GROUP}, one group a 16-byte vector ${how}`);
  const i = segs.findIndex((s) => s.offsetW % Q4_GROUP !== 0);
  if (i >= 0) {
    const what = segmented ? `segment ${i}'s offsetW` : "offsetW";
    throw new Error(`matvec: q4 W needs ${what} (${segs[i].offsetW}) to be a multiple of ${Q4_GROUP} ${how}`);
  }
  throw new Error(
    `matvec: q4 W needs x's rows to start on 16 bytes: offsetX (${offX}) and ldx (${ldx}) multiples of 4 ${how}`,
  );
}

/** Throws unless `v` is a positive integer. */
function positive(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) throw new Error(`matvec: ${name} = ${v} must be a positive integer`);
}

/** Checks that `rows` rows of `cols` elements, `ld` apart from element `offset`, fit in `buf` (and u32 indexing), at
 * `bytesPerElement` (4 f32, 2 packed 16-bit, 0.5 q4's nibbles, 1/16 q4's scales), rounded up to whole u32 words.
 * `seg` >= 0 names the segment in the error. Runs for every binding of every matvec, so the message is built only
 * when it throws. */
function check(
  what: string,
  seg: number,
  buf: GPUBuffer,
  bytesPerElement: number,
  offset: number,
  rows: number,
  ld: number,
  cols: number,
) {
  const end = offset + (rows - 1) * ld + cols;
  const bytes = Math.ceil((end * bytesPerElement) / 4) * 4; // whole u32 words (16-bit and q4 elements packed)
  const ok = Number.isInteger(offset) && offset >= 0 && Number.isInteger(ld) && ld >= cols;
  if (ok && end <= 0xffffffff && bytes <= sizeOf(buf)) return;
  const name = seg >= 0 ? `${what} segment ${seg}` : what;
  for (const [k, v] of Object.entries({ offset, ld })) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`matvec: ${name} ${k} = ${v} must be an integer >= 0`);
  }
  if (ld < cols) throw new Error(`matvec: ${name} row stride ${ld} is less than its row length ${cols}`);
  if (end > 0xffffffff) throw new Error(`matvec: ${name} spans ${end} elements, past u32 indexing`);
  throw new Error(`matvec: ${name} needs ${bytes} bytes (elements up to ${end - 1}) but its buffer has ${buf.size}`);
}
