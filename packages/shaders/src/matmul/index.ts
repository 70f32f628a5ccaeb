// Matmul C = alpha·op(A)·op(B) (+ bias) (+ C), op = identity or transpose per operand, batched with
// strides (0 broadcasts), B in f32 or packed bf16/f16. Three variants, chosen per device by measuring.
import { Params, type Gpu, type KernelSpec, type Recorder, Rng, packHalf } from "@webart/gpu";
import { isCpuDevice } from "@webart/gpu";
import { tune, type TuneOptions } from "../tune/index.ts";
import params from "./params.wgsl";
import regblockCode from "./register_blocked.wgsl";
import tiledCode from "./tiled.wgsl";
import wideCode from "./wide.wgsl";
import absmaxCode from "./absmax.wgsl";
import { relMaxDiff } from "../util/diff.ts";
import {
  COOP_STAGINGS,
  coopBlock,
  coopGeometry,
  coopShapes,
  coopSpec,
  coopVectorB,
  type CoopShape,
  type CoopStaging,
  type CoopStagingChoice,
} from "./coop.ts";

export {
  COOP_FEATURE,
  COOP_SHAPES,
  COOP_STAGINGS,
  coopConfig,
  coopGeometry,
  coopShapes,
  type CoopGeometry,
  type CoopShape,
  type CoopStaging,
  type CoopStagingChoice,
} from "./coop.ts";

/** Letters say whether A and B are transposed: "nt" is x·Wᵀ with W [N, K], "tn" is Aᵀ·B. */
export type MatmulMode = "nn" | "nt" | "tn" | "tt";
/** B's storage: f32, or 16-bit floats packed two per u32 over the flat row-major array. */
export type WeightDtype = "f32" | "bf16" | "f16";
/** regblock: registers only, no workgroup memory (CPU devices); tiled: 64 x 64 blocks through workgroup memory,
 * 4 x 4 a thread; wide: 128 x 128 blocks, 8 x 8 a thread read as vec4 from workgroup memory (large GPU problems). */
export const MATMUL_VARIANTS = ["regblock", "tiled", "wide"] as const;
/** The f32 variants, which tuning ranks, and coop: products on tensor cores (subgroup matrices) with operands
 *  rounded to f16, used only where a caller asks for it (it changes the numbers), on devices that have them. */
export type MatmulVariant = (typeof MATMUL_VARIANTS)[number] | "coop";

/** What start-up tuning (tune/kernels.ts) chooses for matmul: a variant per mode and B dtype, e.g. "nt.bf16", and
 *  where the device has tensor cores, the coop variant's workgroup shape and staging. */
export type MatmulTuning = Partial<Record<`${MatmulMode}.${WeightDtype}`, MatmulVariant>> & {
  coop?: CoopShape;
  coopStaging?: CoopStagingChoice;
};

export interface MatmulBuffers {
  a: GPUBuffer;
  b: GPUBuffer;
  c: GPUBuffer;
  /** [N] f32 added to every row (once, after alpha). */
  bias?: GPUBuffer;
  /**
   * coop only: absMax's output for A (max |A| in its first word). A is scaled by the power of two that brings that
   * to [2^14, 2^15) before it is rounded to f16, and the result scaled back: for operands outside f16's range, as
   * gradients (down to ~1e-8) are. Not with a bias.
   */
  scaleA?: GPUBuffer;
}

export interface MatmulDims {
  /** C is (M, N); the reduction runs over K. */
  M: number;
  N: number;
  K: number;
}

export interface MatmulOptions {
  mode?: MatmulMode;
  bDtype?: WeightDtype;
  batch?: number;
  /** Row strides in elements (defaults: tight). ldc > N with offsetC writes a column range of a wider C. */
  lda?: number;
  ldb?: number;
  ldc?: number;
  /** Element offsets into each buffer (B's counts 16-bit elements when packed, so odd values work). */
  offsetA?: number;
  offsetB?: number;
  offsetC?: number;
  /** Elements between batches (defaults: one tight matrix); 0 reuses the same matrix for every batch. */
  strideA?: number;
  strideB?: number;
  strideC?: number;
  offsetBias?: number;
  /** C += result instead of C = result (gradient accumulation). */
  accumulate?: boolean;
  alpha?: number;
  /** Force a variant; otherwise the tuned one, else a default for the device's architecture. */
  variant?: MatmulVariant;
  tuning?: MatmulTuning;
  /** coop only: the workgroup's shape (COOP_SHAPES). */
  coopShape?: CoopShape;
  /** coop only: "vec" reads operands 16 bytes a load where their layout allows (CoopStaging), "scalar" an element a
   *  load (default: the tuned one, else scalar). */
  coopStaging?: CoopStagingChoice;
}

const B_KIND: Record<WeightDtype, number> = { f32: 0, bf16: 1, f16: 2 };
/** Threads per workgroup (WGN, WGM) and C elements per thread (TN, TM) of each variant. */
const GEOMETRY: Record<(typeof MATMUL_VARIANTS)[number], { WGN: number; WGM: number; TN: number; TM: number }> = {
  regblock: { WGN: 4, WGM: 4, TN: 8, TM: 8 },
  tiled: { WGN: 16, WGM: 16, TN: 4, TM: 4 },
  wide: { WGN: 16, WGM: 16, TN: 8, TM: 8 },
};

const specs = new Map<string, KernelSpec>();

export function matmulSpec(
  variant: (typeof MATMUL_VARIANTS)[number],
  bDtype: WeightDtype = "f32",
  transB = false,
): KernelSpec {
  // Register blocking with 16-bit B in (K, N) layout gives each thread adjacent column pairs (one word).
  const pairN = variant === "regblock" && bDtype !== "f32" && !transB;
  const key = `${variant}.${bDtype}.${pairN}`;
  let s = specs.get(key);
  if (!s) {
    const { WGN, WGM } = GEOMETRY[variant];
    const kind = B_KIND[bDtype];
    s =
      variant === "regblock"
        ? {
            name: "matmul_forward",
            code: params + regblockCode,
            overrides: { B_KIND: kind, PAIR_N: pairN ? 1 : 0, WGN, WGM },
          }
        : variant === "tiled"
          ? { name: "matmul_forward_tiled", code: params + tiledCode, overrides: { B_KIND: kind, WGN, WGM, BK: 16 } }
          : { name: "matmul_forward_wide", code: params + wideCode, overrides: { B_KIND: kind, WGN, WGM, BK: 8 } };
    specs.set(key, s);
  }
  return s;
}

export function defaultMatmulVariant(gpu: Gpu): MatmulVariant {
  return isCpuDevice(gpu) ? "regblock" : "tiled";
}

/** The variant matmul() uses: tuned for this mode and dtype, else tuned for nn/f32, else the device's default. */
export function matmulVariant(
  gpu: Gpu,
  mode: MatmulMode = "nn",
  bDtype: WeightDtype = "f32",
  tuning?: MatmulTuning,
): MatmulVariant {
  return tuning?.[`${mode}.${bDtype}`] ?? tuning?.["nn.f32"] ?? defaultMatmulVariant(gpu);
}

/**
 * Times every variant on this device for each (mode, dtype) on a size×size×size problem and keeps the winners
 * with the device (see tune/), under keys like "matmul.nn.f32@256". Returns them as matmul's tuning.
 */
export async function tuneMatmul(
  gpu: Gpu,
  cases: { mode: MatmulMode; bDtype: WeightDtype }[] = [{ mode: "nn", bDtype: "f32" }],
  size = 256,
  opts: TuneOptions = {},
): Promise<MatmulTuning> {
  const rng = new Rng(1);
  const values = rng.f32(size * size);
  const a = gpu.upload(values, "tune");
  const c = gpu.buffer(size * size * 4, "tune");
  const out: MatmulTuning = {};
  try {
    for (const { mode, bDtype } of cases) {
      const b = gpu.upload(bDtype === "f32" ? values : packHalf(values, bDtype), "tune");
      const dims = { M: size, N: size, K: size };
      try {
        out[`${mode}.${bDtype}`] = await tune(
          gpu,
          `matmul.${mode}.${bDtype}@${size}`,
          MATMUL_VARIANTS,
          (variant, rec) => matmul(gpu, rec, { a, b, c }, dims, { mode, bDtype, variant }),
          opts,
        );
      } finally {
        gpu.release(b);
      }
    }
    // The coop variant's workgroup shape and staging, on the linear layers' problem (the first case). The shapes
    // checked on a GPU (COOP_CHECKED, scalar staging) are candidates; the others only where they give what a checked
    // one gives on ragged problems on this device.
    const shapes = coopShapes(gpu);
    if (shapes.length) {
      const { mode, bDtype } = cases[0];
      const checked = shapes.filter((s) => COOP_CHECKED.includes(s));
      const reference = checked[checked.length - 1];
      const candidates: string[] = [];
      for (const shape of shapes) {
        for (const staging of COOP_STAGINGS) {
          const choice = staging === "vec" ? `${shape}+vec` : shape;
          if (staging === "scalar" && checked.includes(shape)) {
            candidates.push(choice);
            continue;
          }
          const diff = reference ? await coopDiff(gpu, coopChoice(choice), coopChoice(reference), bDtype) : Infinity;
          if (diff <= COOP_DIFF_TOL) candidates.push(choice);
          else gpu.notes.push(`matmul: coop ${choice} is not used here: ${diffNote(diff, reference)}`);
        }
      }
      const b = gpu.upload(bDtype === "f32" ? values : packHalf(values, bDtype), "tune");
      try {
        const pick = await tune(
          gpu,
          `matmul.coop+staging.${mode}.${bDtype}@${size}`,
          candidates,
          (choice, rec) =>
            matmul(gpu, rec, { a, b, c }, { M: size, N: size, K: size }, { mode, bDtype, ...coopChoice(choice) }),
          opts,
        );
        const { coopShape, coopStaging } = coopChoice(pick);
        out.coop = coopShape;
        out.coopStaging = coopStaging;
      } finally {
        gpu.release(b);
      }
    }
  } finally {
    gpu.release(a, c);
  }
  return out;
}

/** A coop tuning candidate ("16x2x2", "16x2x2+vec") as matmul options. */
function coopChoice(choice: string): { variant: "coop"; coopShape: CoopShape; coopStaging: CoopStagingChoice } {
  const [shape, vec] = choice.split("+");
  return { variant: "coop", coopShape: shape as CoopShape, coopStaging: vec ? "vec" : "scalar" };
}

/** The coop shapes that have run on a GPU (checked by `npm run bench -- gpu` on the H200), with scalar staging. */
const COOP_CHECKED: readonly CoopShape[] = ["4x2x2", "8x4x2", "16x2x2"];

/** Every coop choice multiplies the same f16 operands and sums each output over k in the same order, 16 at a time:
 *  they agree to rounding. */
const COOP_DIFF_TOL = 1e-5;

function diffNote(diff: number, reference: string | undefined): string {
  if (!reference) return "no checked shape runs on this device to compare it with";
  return Number.isFinite(diff)
    ? `it differs from ${reference} by ${diff.toExponential(2)} (relative, max)`
    : "it failed to build or run";
}

type CoopChoice = Pick<MatmulOptions, "coopShape" | "coopStaging">;

/**
 * The largest difference, relative to the largest magnitude, between two coop choices (shape and staging), over the
 * layouts the model runs (nt: the projections; nn: backward's input gradients) on ragged problems with offsets and
 * row strides (Infinity where one fails): a choice not yet run on a GPU is checked against one that has.
 */
export async function coopDiff(gpu: Gpu, a: CoopChoice, b: CoopChoice, bDtype: WeightDtype): Promise<number> {
  const rng = new Rng(11);
  const [M, N, K] = [100, 136, 200];
  let worst = 0;
  for (const mode of ["nt", "nn"] as const) {
    const [lda, ldb] = [K + 8, mode === "nt" ? K + 16 : N + 16];
    const [offA, offB] = [4, 8];
    const av = rng.f32(offA + M * lda);
    const bv = rng.f32(offB + (mode === "nt" ? N : K) * ldb);
    const A = gpu.upload(av, "tune");
    const B = gpu.upload(bDtype === "f32" ? bv : packHalf(bv, bDtype), "tune");
    const cs = [gpu.buffer(M * N * 4, "tune"), gpu.buffer(M * N * 4, "tune")];
    try {
      const rec = gpu.recorder();
      const reads = [a, b].map((choice, i) => {
        const o = { mode, bDtype, lda, ldb, offsetA: offA, offsetB: offB, variant: "coop" as const };
        matmul(gpu, rec, { a: A, b: B, c: cs[i] }, { M, N, K }, { ...o, ...choice });
        return rec.read(cs[i], M * N * 4);
      });
      for (const r of reads) r.catch(() => {}); // a failed submit rejects them too: awaited below only on success
      await rec.submit();
      const [x, y] = (await Promise.all(reads)).map((r) => new Float32Array(r));
      worst = Math.max(worst, relMaxDiff(x, y));
    } catch {
      worst = Infinity;
    } finally {
      gpu.release(A, B, ...cs);
    }
  }
  return worst;
}

/**
 * Which operands the coop matmul reads 16 bytes a load, for a staging choice and a problem's layout: with "vec", A
 * where it is not transposed, and B, each where a vector never straddles a row's end or the problem's edge (the
 * vectorised axis, the row stride and every offset whole vectors).
 */
export function coopStagingFor(
  choice: CoopStagingChoice,
  mode: MatmulMode,
  bDtype: WeightDtype,
  l: {
    N: number;
    K: number;
    batch: number;
    lda: number;
    ldb: number;
    offA: number;
    offB: number;
    sA: number;
    sB: number;
  },
): CoopStaging {
  const vec = choice === "vec";
  const whole = (v: number, extent: number, ld: number, off: number, stride: number) =>
    extent % v === 0 && ld % v === 0 && off % v === 0 && (l.batch === 1 || stride % v === 0);
  return {
    vecA: vec && mode[0] === "n" && whole(4, l.K, l.lda, l.offA, l.sA),
    vecB: vec && whole(coopVectorB(B_KIND[bDtype]), mode[1] === "t" ? l.K : l.N, l.ldb, l.offB, l.sB),
  };
}

/** Records C = alpha·op(A)·op(B) (+ bias) (+ C). Checks every access against the buffers' sizes first. */
export function matmul(
  gpu: Gpu,
  rec: Recorder,
  { a, b, c, bias, scaleA }: MatmulBuffers,
  { M, N, K }: MatmulDims,
  o: MatmulOptions = {},
): void {
  const { mode = "nn", bDtype = "f32", batch = 1, alpha = 1 } = o;
  const tA = mode[0] === "t";
  const tB = mode[1] === "t";
  for (const [k, v] of Object.entries({ M, N, K, batch })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`matmul: ${k} = ${v} must be a positive integer`);
  }
  if (!(bDtype in B_KIND)) throw new Error(`matmul: bDtype "${bDtype}" is not supported (f32, bf16, f16)`);
  const lda = o.lda ?? (tA ? M : K);
  const ldb = o.ldb ?? (tB ? K : N);
  const ldc = o.ldc ?? N;
  const rowsA = tA ? K : M;
  const rowsB = tB ? N : K;
  const sA = o.strideA ?? rowsA * lda;
  const sB = o.strideB ?? rowsB * ldb;
  const sC = o.strideC ?? M * ldc;
  const [offA, offB, offC, offBias] = [o.offsetA ?? 0, o.offsetB ?? 0, o.offsetC ?? 0, o.offsetBias ?? 0];
  const half = bDtype !== "f32";
  // Robustness is off on the engine's devices, so every index the kernel can form is checked here.
  checkOperand("A", a, 4, offA, batch, sA, rowsA, lda, tA ? M : K);
  checkOperand("B", b, half ? 2 : 4, offB, batch, sB, rowsB, ldb, tB ? K : N);
  checkOperand("C", c, 4, offC, batch, sC, M, ldc, N);
  if (bias) checkOperand("bias", bias, 4, offBias, 1, 0, 1, N, N);
  if (c === a || c === b || c === bias) throw new Error("matmul: C must not alias A, B or bias");

  const variant = o.variant ?? matmulVariant(gpu, mode, bDtype, o.tuning);
  if (scaleA && (variant !== "coop" || bias || scaleA.size < 4 || scaleA === c))
    throw new Error("matmul: scaleA needs the coop variant, no bias, and its own buffer of absMax's output");
  let spec: KernelSpec;
  let wg: [number, number, number];
  if (variant === "coop") {
    const cg = coopGeometry(gpu, o.coopShape ?? o.tuning?.coop);
    const { BM, BN } = coopBlock(cg);
    const choice = o.coopStaging ?? o.tuning?.coopStaging ?? "scalar";
    const layout = { N, K, batch, lda, ldb, offA, offB, sA, sB };
    spec = coopSpec(cg, B_KIND[bDtype], !gpu.kind.robustness, coopStagingFor(choice, mode, bDtype, layout));
    wg = [Math.ceil(N / BN), Math.ceil(M / BM), batch];
  } else {
    const g = GEOMETRY[variant];
    if (!g) throw new Error(`matmul: unknown variant "${variant}" (${[...MATMUL_VARIANTS, "coop"].join(", ")})`);
    spec = matmulSpec(variant, bDtype, tB);
    wg = [Math.ceil(N / (g.WGN * g.TN)), Math.ceil(M / (g.WGM * g.TM)), batch];
  }
  const max = gpu.limits.maxComputeWorkgroupsPerDimension;
  if (wg.some((x) => x > max)) throw new Error(`matmul: grid ${wg.join("×")} exceeds ${max} workgroups per dimension`);
  const flags = (tA ? 1 : 0) | (tB ? 2 : 0) | (bias ? 4 : 0) | (o.accumulate ? 8 : 0) | (scaleA ? 16 : 0);
  const offS = scaleA ? 0 : offBias;
  const params = new Params().u32(M, N, K, flags, lda, ldb, ldc).f32(alpha).u32(offA, offB, offC, offS, sA, sB, sC);
  // The bias binding holds A's scale where there is one; with neither, A fills it (never read: both are read-only
  // storage, so sharing is valid).
  rec.dispatch(spec, [a, b, bias ?? scaleA ?? a, c], wg, params);
}

/** Checks that the highest element index of a strided, batched matrix fits the buffer and a u32. */
function checkOperand(
  name: string,
  buf: GPUBuffer,
  bytesPerElement: number,
  offset: number,
  batch: number,
  stride: number,
  rows: number,
  ld: number,
  cols: number,
): void {
  for (const [k, v] of Object.entries({ offset, stride, ld })) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`matmul: ${name} ${k} = ${v} must be an integer >= 0`);
  }
  if (ld < cols) throw new Error(`matmul: ${name} row stride ${ld} is less than its row length ${cols}`);
  const end = offset + (batch - 1) * stride + (rows - 1) * ld + cols; // one past the last element
  const bytes = bytesPerElement === 2 ? Math.ceil(end / 2) * 4 : end * 4;
  if (end > 0xffffffff) throw new Error(`matmul: ${name} spans ${end} elements, past u32 indexing`);
  if (bytes > buf.size) {
    throw new Error(`matmul: ${name} needs ${bytes} bytes (elements up to ${end - 1}) but its buffer has ${buf.size}`);
  }
}

/** Workgroups of absMax's first pass: at most this many, so the second pass is one workgroup's loop. */
const ABSMAX_PARTS = 512;
const absmaxPartial: KernelSpec = { name: "absmax_partial", code: absmaxCode };
const absmaxFinal: KernelSpec = { name: "absmax_final", code: absmaxCode };

/** Bytes of absMax's output buffer: the max, then its first pass's partial maxima. */
export const ABSMAX_BYTES = (1 + ABSMAX_PARTS) * 4;

/**
 * out[0] = max |x[offset .. offset + n)|, in two dispatches (out holds ABSMAX_BYTES; its other words are scratch).
 * The coop matmul's `scaleA` reads it to scale A into f16's range before rounding.
 */
export function absMax(gpu: Gpu, rec: Recorder, x: GPUBuffer, out: GPUBuffer, n: number, offset = 0): void {
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(offset) || offset < 0)
    throw new Error(`absMax: n = ${n} and offset = ${offset} must be integers, n >= 1, offset >= 0`);
  if ((offset + n) * 4 > x.size) throw new Error(`absMax: x needs ${(offset + n) * 4} bytes but has ${x.size}`);
  if (out.size < ABSMAX_BYTES) throw new Error(`absMax: out needs ${ABSMAX_BYTES} bytes but has ${out.size}`);
  if (out === x) throw new Error("absMax: out must not alias x");
  const parts = Math.min(ABSMAX_PARTS, Math.ceil(n / (256 * 4)));
  const params = new Params().u32(n, offset, parts, 0);
  rec.dispatch(absmaxPartial, [out, x], [parts, 1, 1], params);
  rec.dispatch(absmaxFinal, [out], [1, 1, 1], params);
}

/** One row-range shard of a weight W [N, K] that was split across buffers (e.g. an LM head). */
export interface WeightShard {
  buffer: GPUBuffer;
  /** Rows of W (output columns of C) in this shard. */
  rows: number;
  /** Element offset of the shard's first row inside its buffer. */
  offset?: number;
}

/**
 * C[:, n0:n1] = A·W[n0:n1]ᵀ (+ bias[n0:n1]) for each shard in order, into a C with row stride ldc
 * (default: all shards' rows) starting at column offsetC; so the shards fill one wide C.
 */
export function matmulShards(
  gpu: Gpu,
  rec: Recorder,
  { a, shards, c, bias }: { a: GPUBuffer; shards: WeightShard[]; c: GPUBuffer; bias?: GPUBuffer },
  { M, K }: Omit<MatmulDims, "N">,
  o: Omit<MatmulOptions, "mode" | "ldb" | "offsetB" | "strideB" | "batch"> = {},
): void {
  const total = shards.reduce((s, x) => s + x.rows, 0);
  let n0 = 0;
  for (const s of shards) {
    matmul(
      gpu,
      rec,
      { a, b: s.buffer, c, bias },
      { M, N: s.rows, K },
      {
        ...o,
        mode: "nt",
        offsetB: s.offset ?? 0,
        ldc: o.ldc ?? total,
        offsetC: (o.offsetC ?? 0) + n0,
        offsetBias: (o.offsetBias ?? 0) + n0,
      },
    );
    n0 += s.rows;
  }
}
