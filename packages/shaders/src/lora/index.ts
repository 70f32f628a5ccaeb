// LoRA on a linear layer over N tokens: forward y += s·(x·Aᵀ)·Bᵀ keeping t = x·Aᵀ, backward dt, dB, dA, dx.
// A (R, in) and B (out, R) sit at element offsets in one flat f32 buffer of every adapter (gradients likewise).
import { kernelSpec, Params, sizeOf, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./forward_backward.wgsl";
import mergeCode from "./merge.wgsl";
import { isCpuDevice } from "@webart/gpu";
import type { WeightDtype } from "../matmul/index.ts";

/** Workgroup shape of the strided matmul (see forward_backward.wgsl): threads along i, j (4 columns each), k. */
export interface LoraTiling {
  WI: number;
  WJ: number;
  /** Threads splitting the sum over k (power of two); 1 avoids workgroup memory and barriers. */
  WK: number;
  /** Rows per thread, 1..4. */
  TM: number;
  /** Elements of k a workgroup sums (a multiple of WK); a longer k is split over workgroups, whose partial sums a
   * second dispatch (lora_reduce) adds up in order. Absent: each workgroup sums the whole k. */
  KC?: number;
}

export type LoraProduct = "shrink" | "expand" | "grad";

/**
 * Default shapes per product on GPUs. shrink (t, dt: long k, J = R): threads split k and sum in workgroup
 * memory, both halves of R = 8 in one workgroup (x or dy is read once, not once per 4 columns). expand (y, dx: k = R, long j): threads along j for coalesced stores. grad (dA, dB: k = N, J = R):
 * threads along i, where P is contiguous, both halves of R = 8 in one workgroup (so P is read once), a few threads
 * splitting k, and k split over workgroups by 128 tokens. Without that split, a gradient of I = 896 rows over
 * 4096 tokens was 56 workgroups each walking 512 tokens in turn (the H200 profile of a Qwen2.5-0.5B GRPO step:
 * lora_backward 15% of the GPU time, ~10x what its bytes need).
 */
export const LORA_TILING_GPU: Record<LoraProduct, LoraTiling> = {
  shrink: { WI: 1, WJ: 2, WK: 64, TM: 4 },
  expand: { WI: 1, WJ: 64, WK: 1, TM: 4 },
  grad: { WI: 32, WJ: 2, WK: 4, TM: 1, KC: 128 },
};

/** On CPU implementations (SwiftShader) barriers cost more than they save: register blocking only. */
export const LORA_TILING_CPU: Record<LoraProduct, LoraTiling> = {
  shrink: { WI: 16, WJ: 1, WK: 1, TM: 4 },
  expand: { WI: 1, WJ: 16, WK: 1, TM: 4 },
  grad: { WI: 16, WJ: 1, WK: 1, TM: 4 },
};

/** The two sets of shapes: LORA_TILING_CPU (register blocking only) and LORA_TILING_GPU (shared sums). */
export const LORA_LAYOUTS = ["cpu", "gpu"] as const;
export type LoraLayout = (typeof LORA_LAYOUTS)[number];

/** What start-up tuning (tune/kernels.ts) chooses for LoRA. */
export interface LoraTuning {
  layout: LoraLayout;
}

/** The set tuning measured faster on this device, else the one for its kind. */
export function loraLayout(gpu: Gpu, tuning?: LoraTuning): LoraLayout {
  return tuning?.layout ?? (isCpuDevice(gpu) ? "cpu" : "gpu");
}

/** The shapes of a layout (default: this device's), with any given per-product shapes on top. */
export function loraTiling(
  gpu: Gpu,
  over: LoraOptions["tiling"] = {},
  layout: LoraLayout = loraLayout(gpu),
): Record<LoraProduct, LoraTiling> {
  return { ...(layout === "cpu" ? LORA_TILING_CPU : LORA_TILING_GPU), ...over };
}

/** Tokens a workgroup sums in LoRA's gradient products where this device's layout splits them over workgroups
 * (a partial-sums buffer the memory planner counts), else undefined. */
export function loraGradChunk(gpu: Gpu, tuning?: LoraTuning): number | undefined {
  return loraTiling(gpu, {}, loraLayout(gpu, tuning)).grad.KC;
}

export const loraForwardSpec = (t: LoraTiling): KernelSpec => kernelSpec("lora_forward", code, overrides(t));
export const loraBackwardSpec = (t: LoraTiling): KernelSpec => kernelSpec("lora_backward", code, overrides(t));
const reduceSpec: KernelSpec = { name: "lora_reduce", code };
/** The pipeline's overrides: the workgroup shape (KC is a parameter). */
const overrides = ({ WI, WJ, WK, TM }: LoraTiling) => ({ WI, WJ, WK, TM });

export interface LoraDims {
  N: number;
  in: number;
  out: number;
  R: number;
  /** alpha / R. */
  scale: number;
}

/** A (R, in) at element `a` and B (out, R) at element `b` of `buffer` (the parameters, or their gradients). */
export interface LoraSlot {
  buffer: GPUBuffer;
  a: number;
  b: number;
}

export interface LoraOptions {
  /** Which set of shapes (default: loraLayout(gpu, tuning)). */
  layout?: LoraLayout;
  tuning?: LoraTuning;
  /** Per-product shapes over the layout's. */
  tiling?: Partial<Record<LoraProduct, LoraTiling>>;
}

/** An operand: element (u, v) at off + u * su + v * sv of a buffer (or a caller's binding window). */
interface Operand {
  buf: Binding;
  off: number;
  su: number;
  sv: number;
}

const size = (b: Binding): number => ("buffer" in b ? (b.size ?? b.buffer.size - (b.offset ?? 0)) : b.size);

/** Binds an operand of (du, dv) elements, through an aligned window when its buffer exceeds one binding. */
function bind(gpu: Gpu, x: Operand, du: number, dv: number, what: string): { binding: Binding; off: number } {
  const end = x.off + (du - 1) * x.su + (dv - 1) * x.sv + 1; // elements
  if (size(x.buf) < end * 4) throw new Error(`lora: ${what} holds ${size(x.buf)} bytes, needs ${end * 4}`);
  if ("buffer" in x.buf || x.buf.size <= gpu.maxStorageBinding) return { binding: x.buf, off: x.off };
  const align = gpu.limits.minStorageBufferOffsetAlignment;
  const start = Math.floor((x.off * 4) / align) * align;
  if (end * 4 - start > gpu.maxStorageBinding) {
    throw new Error(`lora: ${what} spans ${end * 4 - start} bytes, more than one storage binding`);
  }
  return { binding: { buffer: x.buf, offset: start, size: end * 4 - start }, off: x.off - start / 4 };
}

function checkTiling(gpu: Gpu, t: LoraTiling): void {
  const threads = t.WI * t.WJ * t.WK;
  const ok =
    [t.WI, t.WJ, t.WK, t.TM].every((v) => Number.isInteger(v) && v >= 1) &&
    Number.isInteger(Math.log2(t.WK)) &&
    t.TM <= 4 &&
    (t.KC === undefined || (Number.isInteger(t.KC) && t.KC >= t.WK && t.KC % t.WK === 0)) &&
    threads <= gpu.limits.maxComputeInvocationsPerWorkgroup &&
    threads * t.TM * 16 <= gpu.limits.maxComputeWorkgroupStorageSize;
  if (!ok) throw new Error(`lora: tiling ${JSON.stringify(t)} is invalid on this device`);
}

/** One product out (I, J) (+)= scale * P (I, K) · Q (K, J), all strided. */
interface Product {
  IJK: [number, number, number];
  P: Operand;
  Q: Operand;
  O: Operand;
  scale: number;
  accumulate: boolean;
}

/** Problems one dispatch runs (forward_backward.wgsl's Params.pr). */
const MAX_PROBLEMS = 3;

/**
 * Records the products, as few dispatches as they allow: consecutive ones on the same three bindings (and all split
 * over workgroups, or none) share a dispatch, up to MAX_PROBLEMS; their split sums share one lora_reduce. Products
 * that write the same elements must go in separate calls.
 */
function products(gpu: Gpu, rec: Recorder, spec: (t: LoraTiling) => KernelSpec, t: LoraTiling, list: Product[]): void {
  checkTiling(gpu, t);
  const items = list
    .filter((x) => x.IJK[0] > 0 && x.IJK[1] > 0)
    .map((x) => {
      const [I, J, K] = x.IJK;
      const splits = t.KC ? Math.max(1, Math.ceil(K / t.KC)) : 1;
      return {
        ...x,
        p: bind(gpu, x.P, I, K, "P"),
        q: bind(gpu, x.Q, K, J, "Q"),
        o: bind(gpu, x.O, I, J, "out"),
        splits,
      };
    });
  type Item = (typeof items)[number];
  const same = (a: Item, b: Item) =>
    a.p.binding === b.p.binding &&
    a.q.binding === b.q.binding &&
    a.o.binding === b.o.binding &&
    a.splits > 1 === b.splits > 1;
  for (let i = 0; i < items.length;) {
    let j = i + 1;
    while (j < items.length && j - i < MAX_PROBLEMS && same(items[i], items[j])) j++;
    dispatchProducts(gpu, rec, spec(t), t, items.slice(i, j));
    i = j;
  }
}

function dispatchProducts(
  gpu: Gpu,
  rec: Recorder,
  spec: KernelSpec,
  t: LoraTiling,
  items: (Product & { p: Bound; q: Bound; o: Bound; splits: number })[],
): void {
  const split = items[0].splits > 1;
  // Split: each workgroup's partial sums (scaled) into a (splits, I, J) region of one scratch, then added up.
  const partLen = split ? items.reduce((n, x) => n + x.splits * x.IJK[0] * x.IJK[1], 0) : 0;
  const part = split ? gpu.buffer(partLen * 4, "activations", "lora partial sums") : undefined;
  const params = new Params().u32(items.length, 0, 0, 0);
  const reduce = new Params().u32(items.length, 0, 0, 0);
  let first = 0;
  let partOff = 0;
  let elements = 0;
  for (let i = 0; i < MAX_PROBLEMS; i++) {
    const x = items[i];
    if (!x) {
      params
        .u32(...new Array<number>(15).fill(0))
        .f32(0)
        .u32(0, 0, 0, 0xffffffff);
      reduce.u32(...new Array<number>(8).fill(0), 0xffffffff, 0, 0, 0);
      continue;
    }
    const [I, J, K] = x.IJK;
    const tilesI = Math.ceil(I / (t.WI * t.TM));
    const tiles = tilesI * Math.ceil(J / (t.WJ * 4));
    const { p, q, o } = x;
    params
      .u32(I, J, K, tilesI, p.off, x.P.su, x.P.sv, tiles, q.off, x.Q.su, x.Q.sv, split ? 0 : x.accumulate ? 1 : 0)
      .u32(split ? partOff : o.off, split ? J : x.O.su, split ? 1 : x.O.sv)
      .f32(x.scale)
      .u32(x.splits, split ? t.KC! : Math.max(1, K), split ? I * J : 0, first);
    reduce.u32(I, J, x.splits, x.accumulate ? 1 : 0, o.off, x.O.su, x.O.sv, partOff, elements, 0, 0, 0);
    first += tiles * x.splits;
    partOff += x.splits * I * J;
    elements += I * J;
  }
  rec.dispatch(spec, [items[0].p.binding, items[0].q.binding, part ?? items[0].o.binding], gpu.grid(first), params);
  if (!part) return;
  rec.dispatch(reduceSpec, [part, items[0].o.binding], gpu.grid(Math.ceil(elements / 64)), reduce);
  gpu.release(part); // the pool keeps it until this recorder is submitted
}

type Bound = { binding: Binding; off: number };

function checkDims(d: LoraDims): void {
  const ints = [d.N, d.in, d.out, d.R].every((v) => Number.isInteger(v) && v >= 0);
  if (!ints || d.R < 1 || d.in < 1 || d.out < 1) throw new Error(`lora: bad dims ${JSON.stringify(d)}`);
}

export interface LoraForwardBuffers {
  /** The adapter's A and B. */
  slot: LoraSlot;
  x: Binding; // (N, in)
  t: Binding; // (N, R) out, kept for the backward
  y: Binding; // (N, out), added to
  /** y's row stride and first element (default out and 0): a column range of a wider product (gate|up). */
  ldy?: number;
  offsetY?: number;
}

/** t = x·Aᵀ (N, R), written; y += s·t·Bᵀ (N, out). x is (N, in). */
export function loraForward(
  gpu: Gpu,
  rec: Recorder,
  { slot, x, t, y, ldy, offsetY }: LoraForwardBuffers,
  d: LoraDims,
  opts: LoraOptions = {},
): void {
  checkDims(d);
  const target = { slot, out: d.out, R: d.R, scale: d.scale, offsetY: offsetY ?? 0, tCol: 0 };
  loraForwardGroup(gpu, rec, { x, t, y, ldy: ldy ?? d.out, ldt: d.R }, { N: d.N, in: d.in }, [target], opts);
}

/** One adapter of a group that shares an input (q, k, v; gate, up): its A and B (and where their gradients go), its
 *  dims, its columns of the group's output (y, dy) and of the group's t (and dt). */
export interface LoraGroupTarget {
  slot: LoraSlot;
  grads?: LoraSlot;
  out: number;
  R: number;
  /** alpha / R. */
  scale: number;
  offsetY: number;
  tCol: number;
  /** Its own output (forward: y, backward: dy) with its row stride, instead of the group's (q, k and v as products of
   *  their own: the group still shares the dispatches that read x or t). */
  own?: { y: Binding; ld: number };
}

export interface LoraGroupBuffers {
  x: Binding; // (N, in), the input the targets share
  /** (N, ldt): each target's x·Aᵀ in its columns tCol.. (written by the forward, read by the backward). */
  t: Binding;
  ldt: number;
}

function checkGroup(d: { N: number; in: number }, targets: LoraGroupTarget[], ldt: number): void {
  for (const e of targets) {
    checkDims({ N: d.N, in: d.in, out: e.out, R: e.R, scale: e.scale });
    if (!(Number.isInteger(e.tCol) && e.tCol >= 0 && e.tCol + e.R <= ldt))
      throw new Error(`lora: t columns ${e.tCol}..${e.tCol + e.R} do not fit its row of ${ldt}`);
  }
}

/**
 * The forward of adapters that share x, each t = x·Aᵀ into its columns of t and y += s·t·Bᵀ into its columns of y
 * (N, ldy): two dispatches for the group (one per product, up to 3 targets each).
 */
export function loraForwardGroup(
  gpu: Gpu,
  rec: Recorder,
  b: LoraGroupBuffers & { y: Binding; ldy: number },
  d: { N: number; in: number },
  targets: LoraGroupTarget[],
  opts: LoraOptions = {},
): void {
  checkGroup(d, targets, b.ldt);
  const { N } = d;
  const tl = loraTiling(gpu, opts.tiling, opts.layout ?? loraLayout(gpu, opts.tuning));
  const T = (e: LoraGroupTarget): Operand => ({ buf: b.t, off: e.tCol, su: b.ldt, sv: 1 }); // (N, R)
  const f = loraForwardSpec;
  // t = x (N, in) · Aᵀ (in, R)
  const shrink = targets.map((e) => ({
    IJK: [N, e.R, d.in] as [number, number, number],
    P: rows(b.x, d.in),
    Q: { buf: e.slot.buffer, off: e.slot.a, su: 1, sv: d.in }, // Aᵀ (in, R)
    O: T(e),
    scale: 1,
    accumulate: false,
  }));
  products(gpu, rec, f, tl.shrink, shrink);
  // y += s · t (N, R) · Bᵀ (R, out)
  const expand = targets.map((e) => ({
    IJK: [N, e.out, e.R] as [number, number, number],
    P: T(e),
    Q: { buf: e.slot.buffer, off: e.slot.b, su: 1, sv: e.R }, // Bᵀ (R, out)
    O: { buf: e.own?.y ?? b.y, off: e.offsetY, su: e.own?.ld ?? b.ldy, sv: 1 },
    scale: e.scale,
    accumulate: true,
  }));
  products(gpu, rec, f, tl.expand, expand);
}

const rows = (buf: Binding, width: number): Operand => ({ buf, off: 0, su: width, sv: 1 });

export interface LoraBackwardBuffers {
  /** The adapter's A and B, and where their gradients go. */
  slot: LoraSlot;
  grads: LoraSlot;
  x: Binding; // (N, in), the forward's input
  t: Binding; // (N, R), saved by the forward
  dy: Binding; // (N, out)
  /** dy's row stride and first element (default out and 0): a column range of a wider gradient (gate|up). */
  lddy?: number;
  offsetDy?: number;
  /** (N, in): dx += dt·A when given (it already holds the base weight's contribution). */
  dx?: Binding;
  /** (N, R) scratch for dt; taken from the pool when absent. */
  dt?: Binding;
}

export interface LoraBackwardOptions extends LoraOptions {
  /** dA += and dB += (default), or = for the first micro-batch. */
  accumulate?: boolean;
}

/** dt = s·dy·B, dB (+)= s·dyᵀ·t, dA (+)= dtᵀ·x, dx += dt·A. Sums over N run in a fixed order (no atomics). */
export function loraBackward(
  gpu: Gpu,
  rec: Recorder,
  b: LoraBackwardBuffers,
  d: LoraDims,
  opts: LoraBackwardOptions = {},
): void {
  checkDims(d);
  const target = {
    slot: b.slot,
    grads: b.grads,
    out: d.out,
    R: d.R,
    scale: d.scale,
    offsetY: b.offsetDy ?? 0,
    tCol: 0,
  };
  const bufs = { x: b.x, t: b.t, ldt: d.R, dy: b.dy, lddy: b.lddy ?? d.out, dx: b.dx, dt: b.dt };
  loraBackwardGroup(gpu, rec, bufs, { N: d.N, in: d.in }, [target], opts);
}

/**
 * The backward of adapters that share x (each with its grads slot), from dy (N, lddy) with each target's columns
 * at its offsetY: dt = s·dy·B, dB (+)= s·dyᵀ·t, dA (+)= dtᵀ·x as one dispatch each for the group (and one sum of
 * split partial sums each), then dx += dt·A, a dispatch a target (they add into the same dx).
 */
export function loraBackwardGroup(
  gpu: Gpu,
  rec: Recorder,
  b: LoraGroupBuffers & { dy: Binding; lddy: number; dx?: Binding; dt?: Binding },
  d: { N: number; in: number },
  targets: LoraGroupTarget[],
  opts: LoraBackwardOptions = {},
): void {
  checkGroup(d, targets, b.ldt);
  const { N } = d;
  if (N === 0) return;
  const tl = loraTiling(gpu, opts.tiling, opts.layout ?? loraLayout(gpu, opts.tuning));
  const acc = opts.accumulate ?? true;
  const f = loraBackwardSpec;
  const scratch = b.dt ? undefined : gpu.buffer(N * b.ldt * 4, "activations", "lora dt");
  const dtBuf = b.dt ?? scratch!;
  const cols = (buf: Binding, e: LoraGroupTarget): Operand => ({ buf, off: e.tCol, su: b.ldt, sv: 1 }); // (N, R)
  const grads = (e: LoraGroupTarget) => {
    if (!e.grads) throw new Error("lora: a target in the backward needs its grads slot");
    return e.grads;
  };
  const IJK = (i: number, j: number, k: number): [number, number, number] => [i, j, k];
  // dt = s · dy (N, out) · B (out, R)
  products(
    gpu,
    rec,
    f,
    tl.shrink,
    targets.map((e) => ({
      IJK: IJK(N, e.R, e.out),
      P: { buf: e.own?.y ?? b.dy, off: e.offsetY, su: e.own?.ld ?? b.lddy, sv: 1 },
      Q: { buf: e.slot.buffer, off: e.slot.b, su: e.R, sv: 1 }, // B (out, R)
      O: cols(dtBuf, e),
      scale: e.scale,
      accumulate: false,
    })),
  );
  // dB (+)= s · dyᵀ (out, N) · t (N, R)
  products(
    gpu,
    rec,
    f,
    tl.grad,
    targets.map((e) => ({
      IJK: IJK(e.out, e.R, N),
      P: { buf: e.own?.y ?? b.dy, off: e.offsetY, su: 1, sv: e.own?.ld ?? b.lddy }, // dyᵀ (out, N)
      Q: cols(b.t, e),
      O: { buf: grads(e).buffer, off: grads(e).b, su: e.R, sv: 1 }, // dB (out, R)
      scale: e.scale,
      accumulate: acc,
    })),
  );
  // dA (+)= dtᵀ · x, computed as its transpose (in, R) = xᵀ (in, N) · dt (N, R)
  products(
    gpu,
    rec,
    f,
    tl.grad,
    targets.map((e) => ({
      IJK: IJK(d.in, e.R, N),
      P: { buf: b.x, off: 0, su: 1, sv: d.in }, // xᵀ (in, N)
      Q: cols(dtBuf, e),
      O: { buf: grads(e).buffer, off: grads(e).a, su: 1, sv: d.in }, // dAᵀ (in, R)
      scale: 1,
      accumulate: acc,
    })),
  );
  // dx (N, in) += dt (N, R) · A (R, in): one call a target, as they all add into dx.
  const dx = b.dx;
  if (dx)
    for (const e of targets) {
      const A = { buf: e.slot.buffer, off: e.slot.a, su: d.in, sv: 1 }; // (R, in)
      products(gpu, rec, f, tl.expand, [
        { IJK: IJK(N, d.in, e.R), P: cols(dtBuf, e), Q: A, O: rows(dx, d.in), scale: 1, accumulate: true },
      ]);
    }
  gpu.release(scratch); // the pool keeps it until this recorder is submitted
}

const MERGE_WG = 256;
const MERGE_KIND = { f32: 0, bf16: 1, f16: 2 } as const;

/** One LoRA target merged into an f32 copy of its weight: `rows` x `cols` (out, in) at element `offsetW` of w (f32, or
 *  16-bit: `wDtype`) and of merged (f32). Rank 0: the weight converted alone. */
export interface LoraMergeDims {
  rows: number;
  cols: number;
  rank: number;
  offsetW: number;
  /** Element offsets of A (rank, cols) and B (rows, rank) in the adapter's buffer. */
  a: number;
  b: number;
  scale: number;
  /** w's element type (merged is f32 whatever it is); default f32. */
  wDtype?: WeightDtype;
}

/**
 * merged = w + scale·B·A over one target's weight, in f32 (the rest of `merged` is left as it is): inference with the
 * adapter then runs the merged weights as a model without one. Checks that every range fits its buffer.
 */
export function loraMerge(
  gpu: Gpu,
  rec: Recorder,
  { w, params, merged }: { w: GPUBuffer; params: GPUBuffer; merged: GPUBuffer },
  d: LoraMergeDims,
): void {
  const kind = MERGE_KIND[d.wDtype ?? "f32"];
  if (kind === undefined) throw new Error(`loraMerge: wDtype "${d.wDtype}" is not supported (f32, bf16, f16)`);
  const n = d.rows * d.cols;
  const need: [string, GPUBuffer, number, number][] = [
    ["weight", w, d.offsetW + n, kind ? 2 : 4],
    ["merged weight", merged, d.offsetW + n, 4],
    ["A", params, d.a + d.rank * d.cols, 4],
    ["B", params, d.b + d.rows * d.rank, 4],
  ];
  for (const [what, buf, end, bytes] of need) {
    const size = Math.ceil((end * bytes) / 4) * 4;
    if (size > sizeOf(buf)) throw new Error(`loraMerge: ${what} needs ${size} bytes but its buffer has ${sizeOf(buf)}`);
  }
  if (w === merged) throw new Error("loraMerge: merged must not alias w");
  const spec = kernelSpec("lora_merge", mergeCode, { WG: MERGE_WG, W_KIND: kind });
  const p = new Params().u32(d.rows, d.cols, d.rank, d.offsetW, d.a, d.b).f32(d.scale).u32(0);
  rec.dispatch(spec, [w, params, merged], gpu.grid(Math.ceil(n / MERGE_WG)), p);
}
