// Decode matvec y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for M = 1..64 rows, W in f32 or packed
// bf16/f16: memory-bound, so W is streamed once per call (larger M: use matmul).
import { Params, type Gpu, type KernelSpec, type Recorder, Rng, packHalf } from "@webart/gpu";
import type { WeightDtype } from "../matmul/index.ts";
import { tune, tuned, type TuneOptions } from "../tune/index.ts";
import code from "./forward.wgsl";
import subgroupCode from "./subgroup.wgsl";

export interface MatvecOptions {
  M: number;
  N: number;
  K: number;
  wDtype?: WeightDtype;
  /** Row strides of x and y in elements (defaults K and N); ldy > N with offsetY writes a column range. */
  ldx?: number;
  ldy?: number;
  /** Element offsets (W's counts 16-bit elements when packed, so a shard may start mid-word). */
  offsetX?: number;
  offsetW?: number;
  offsetY?: number;
  /** [N] f32 added to every row. */
  bias?: GPUBuffer;
  offsetBias?: number;
  /** Force a variant; otherwise the tuned one, else subgroup where available. */
  variant?: MatvecVariant;
}

const W_KIND: Record<WeightDtype, number> = { f32: 0, bf16: 1, f16: 2 };
export const MATVEC_VARIANTS = ["subgroup", "workgroup"] as const;
/** subgroup: lanes split K and subgroupAdd reduces, no barriers (needs the subgroups feature);
 * workgroup: threads split K and reduce through workgroup memory (works everywhere). */
export type MatvecVariant = (typeof MATVEC_VARIANTS)[number];
/** Threads per workgroup; the subgroup variant's workgroup owns CG groups of 16 columns, the other 4. */
const WG: Record<MatvecVariant, number> = { subgroup: 16, workgroup: 64 };
const CG = 4;
/** Rows of x per pass (threads keep MT × 4 sums in the workgroup variant, MT × 16 in the subgroup one). */
const MAX_MT: Record<MatvecVariant, number> = { subgroup: 8, workgroup: 4 };
const specs = new Map<string, KernelSpec>();

export function matvecSpec(variant: MatvecVariant, wDtype: WeightDtype, MT: number): KernelSpec {
  const key = `${variant}.${wDtype}.${MT}`;
  let s = specs.get(key);
  if (!s) {
    const o = { W_KIND: W_KIND[wDtype], WG: WG[variant], MT };
    s =
      variant === "subgroup"
        ? { name: "matvec_forward_subgroup", code: subgroupCode, overrides: { ...o, CG } }
        : { name: "matvec_forward", code, overrides: o };
    specs.set(key, s);
  }
  return s;
}

/** The variants this device can run. */
export function matvecVariants(gpu: Gpu): MatvecVariant[] {
  return MATVEC_VARIANTS.filter((v) => v !== "subgroup" || gpu.features.has("subgroups"));
}

/** The variant matvec() uses here: tuned for this dtype, else subgroup when the device has it. */
export function matvecVariant(gpu: Gpu, wDtype: WeightDtype = "f32"): MatvecVariant {
  const t = tuned(gpu, `matvec.${wDtype}`) as MatvecVariant | undefined;
  return t && matvecVariants(gpu).includes(t) ? t : matvecVariants(gpu)[0];
}

/** Times the available variants on a (1, 4096) × (4096, 1024) problem per dtype and caches the winners. */
export async function tuneMatvec(
  gpu: Gpu,
  dtypes: WeightDtype[] = ["f32"],
  [N, K] = [1024, 4096],
  opts: TuneOptions = {},
): Promise<Record<string, MatvecVariant>> {
  const rng = new Rng(2);
  const values = rng.f32(N * K);
  const [x, y] = [gpu.upload(values.subarray(0, K), "tune"), gpu.buffer(N * 4, "tune")];
  const out: Record<string, MatvecVariant> = {};
  try {
    for (const wDtype of dtypes) {
      const w = gpu.upload(wDtype === "f32" ? values : packHalf(values, wDtype), "tune");
      try {
        out[`matvec.${wDtype}`] = await tune(
          gpu,
          `matvec.${wDtype}`,
          matvecVariants(gpu),
          (variant, rec) => matvec(gpu, rec, x, w, y, { M: 1, N, K, wDtype, variant }),
          opts,
        );
      } finally {
        gpu.release(w);
      }
    }
  } finally {
    gpu.release(x, y);
  }
  return out;
}

/** Records y = x·Wᵀ (+ bias). Checks every access against the buffers' sizes first. */
export function matvec(gpu: Gpu, rec: Recorder, x: GPUBuffer, w: GPUBuffer, y: GPUBuffer, o: MatvecOptions): void {
  const { M, N, K, wDtype = "f32" } = o;
  for (const [k, v] of Object.entries({ M, N, K })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`matvec: ${k} = ${v} must be a positive integer`);
  }
  if (!(wDtype in W_KIND)) throw new Error(`matvec: wDtype "${wDtype}" is not supported (f32, bf16, f16)`);
  const ldx = o.ldx ?? K;
  const ldy = o.ldy ?? N;
  const [offX, offW, offY, offBias] = [o.offsetX ?? 0, o.offsetW ?? 0, o.offsetY ?? 0, o.offsetBias ?? 0];
  check("x", x, 4, offX, M, ldx, K);
  check("W", w, wDtype === "f32" ? 4 : 2, offW, N, K, K);
  check("y", y, 4, offY, M, ldy, N);
  if (o.bias) check("bias", o.bias, 4, offBias, 1, N, N);
  if (y === x || y === w || y === o.bias) throw new Error("matvec: y must not alias x, W or bias");
  const variant = o.variant ?? matvecVariant(gpu, wDtype);
  if (!matvecVariants(gpu).includes(variant)) {
    throw new Error(`matvec: variant "${variant}" is not available here (${matvecVariants(gpu).join(", ")})`);
  }
  // Powers of two only, so a decode batch that shrinks row by row reuses a few pipelines.
  const MT = Math.min(2 ** Math.ceil(Math.log2(M)), MAX_MT[variant]);
  const params = new Params().u32(M, N, K, o.bias ? 1 : 0, ldx, ldy, offW, offY, offBias, offX);
  const groups = Math.ceil(N / (variant === "subgroup" ? 16 * CG : 4));
  // Without a bias, x fills the binding (never read; both are read-only storage).
  rec.dispatch(matvecSpec(variant, wDtype, MT), [x, w, o.bias ?? x, y], gpu.grid(groups), params);
}

function check(
  name: string,
  buf: GPUBuffer,
  bytesPerElement: number,
  offset: number,
  rows: number,
  ld: number,
  cols: number,
) {
  for (const [k, v] of Object.entries({ offset, ld })) {
    if (!Number.isInteger(v) || v < 0) throw new Error(`matvec: ${name} ${k} = ${v} must be an integer >= 0`);
  }
  if (ld < cols) throw new Error(`matvec: ${name} row stride ${ld} is less than its row length ${cols}`);
  const end = offset + (rows - 1) * ld + cols;
  const bytes = bytesPerElement === 2 ? Math.ceil(end / 2) * 4 : end * 4;
  if (end > 0xffffffff) throw new Error(`matvec: ${name} spans ${end} elements, past u32 indexing`);
  if (bytes > buf.size) {
    throw new Error(`matvec: ${name} needs ${bytes} bytes (elements up to ${end - 1}) but its buffer has ${buf.size}`);
  }
}
