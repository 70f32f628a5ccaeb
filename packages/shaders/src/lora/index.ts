// LoRA on a linear layer over N tokens: forward y += s·(x·Aᵀ)·Bᵀ keeping t = x·Aᵀ, backward dt, dB, dA, dx.
// A (R, in) and B (out, R) sit at element offsets in one flat f32 buffer of every adapter (gradients likewise).
import { kernelSpec, Params, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./forward_backward.wgsl";
import { isCpuDevice } from "@webart/gpu";

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

/** out (I, J) (+)= scale * P (I, K) · Q (K, J), all strided. */
function matmul(
  gpu: Gpu,
  rec: Recorder,
  spec: (t: LoraTiling) => KernelSpec,
  t: LoraTiling,
  [I, J, K]: [number, number, number],
  P: Operand,
  Q: Operand,
  O: Operand,
  scale: number,
  accumulate: boolean,
): void {
  if (I === 0 || J === 0) return;
  checkTiling(gpu, t);
  const p = bind(gpu, P, I, K, "P");
  const q = bind(gpu, Q, K, J, "Q");
  const o = bind(gpu, O, I, J, "out");
  const tilesI = Math.ceil(I / (t.WI * t.TM));
  const tiles = tilesI * Math.ceil(J / (t.WJ * 4));
  const splits = t.KC ? Math.max(1, Math.ceil(K / t.KC)) : 1;
  // Split: each workgroup's partial sums (scaled) into a (splits, I, J) scratch, then added up into out.
  const part = splits > 1 ? gpu.buffer(splits * I * J * 4, "activations", "lora partial sums") : undefined;
  const params = new Params()
    .u32(I, J, K, tilesI, p.off, P.su, P.sv, tiles, q.off, Q.su, Q.sv, part ? 0 : accumulate ? 1 : 0)
    .u32(part ? 0 : o.off, part ? J : O.su, part ? 1 : O.sv)
    .f32(scale)
    .u32(splits, part ? t.KC! : Math.max(1, K), part ? I * J : 0, 0);
  rec.dispatch(spec(t), [p.binding, q.binding, part ?? o.binding], gpu.grid(tiles * splits), params);
  if (!part) return;
  const reduce = new Params().u32(I, J, splits, accumulate ? 1 : 0, o.off, O.su, O.sv, 0);
  rec.dispatch(reduceSpec, [part, o.binding], gpu.grid(Math.ceil((I * J) / 64)), reduce);
  gpu.release(part); // the pool keeps it until this recorder is submitted
}

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
  { slot: w, x, t, y, ldy, offsetY }: LoraForwardBuffers,
  d: LoraDims,
  opts: LoraOptions = {},
): void {
  checkDims(d);
  const { N, R } = d;
  const tl = loraTiling(gpu, opts.tiling, opts.layout ?? loraLayout(gpu, opts.tuning));
  const AT = { buf: w.buffer, off: w.a, su: 1, sv: d.in }; // Aᵀ (in, R)
  const BT = { buf: w.buffer, off: w.b, su: 1, sv: R }; // Bᵀ (R, out)
  const f = loraForwardSpec;
  // t = x (N, in) · Aᵀ (in, R); y += s · t (N, R) · Bᵀ (R, out)
  matmul(gpu, rec, f, tl.shrink, [N, R, d.in], rows(x, d.in), AT, rows(t, R), 1, false);
  const Y = { buf: y, off: offsetY ?? 0, su: ldy ?? d.out, sv: 1 };
  matmul(gpu, rec, f, tl.expand, [N, d.out, R], rows(t, R), BT, Y, d.scale, true);
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
  const { N, R } = d;
  if (N === 0) return;
  const [w, g] = [b.slot, b.grads];
  const tl = loraTiling(gpu, opts.tiling, opts.layout ?? loraLayout(gpu, opts.tuning));
  const acc = opts.accumulate ?? true;
  const f = loraBackwardSpec;
  const scratch = b.dt ? undefined : gpu.buffer(N * R * 4, "activations", "lora dt");
  const dt = rows(b.dt ?? scratch!, R); // (N, R)
  const B = { buf: w.buffer, off: w.b, su: R, sv: 1 }; // (out, R)
  const A = { buf: w.buffer, off: w.a, su: d.in, sv: 1 }; // (R, in)
  const dB = { buf: g.buffer, off: g.b, su: R, sv: 1 }; // (out, R)
  const dAT = { buf: g.buffer, off: g.a, su: 1, sv: d.in }; // dAᵀ (in, R)
  const [offDy, ldDy] = [b.offsetDy ?? 0, b.lddy ?? d.out];
  const dyT = { buf: b.dy, off: offDy, su: 1, sv: ldDy }; // (out, N)
  const xT = { buf: b.x, off: 0, su: 1, sv: d.in }; // (in, N)
  // dt = s · dy (N, out) · B (out, R)
  matmul(gpu, rec, f, tl.shrink, [N, R, d.out], { buf: b.dy, off: offDy, su: ldDy, sv: 1 }, B, dt, d.scale, false);
  // dB (+)= s · dyᵀ (out, N) · t (N, R)
  matmul(gpu, rec, f, tl.grad, [d.out, R, N], dyT, rows(b.t, R), dB, d.scale, acc);
  // dA (+)= dtᵀ · x, computed as its transpose (in, R) = xᵀ (in, N) · dt (N, R)
  matmul(gpu, rec, f, tl.grad, [d.in, R, N], xT, dt, dAT, 1, acc);
  // dx (N, in) += dt (N, R) · A (R, in)
  if (b.dx) matmul(gpu, rec, f, tl.expand, [N, d.in, R], dt, A, rows(b.dx, d.in), 1, true);
  gpu.release(scratch); // the pool keeps it until this recorder is submitted
}
