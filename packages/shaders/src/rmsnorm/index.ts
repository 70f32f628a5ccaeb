// RMSNorm (y = x * rstd * w over rows of length C, saving rstd) and its backward (dx, optional dw),
// also used per head for Qwen3's q_norm/k_norm as rows (N*H, D) with weight (D).
import { kernelSpec, Params, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forward from "./forward.wgsl";
import put from "./put.wgsl";
import putAdd from "./put_add.wgsl";
import backward from "./backward.wgsl";
import backwardDw from "./backward_dw.wgsl";
import backwardDwReduce from "./backward_dw_reduce.wgsl";
import { isCpuDevice } from "@webart/gpu";

const WG = 256;

const forwardCode = forward + put;
const forwardAddCode = forward + putAdd;
export const rmsnormForwardSpec = (tpr: number, wg = WG, add = false): KernelSpec =>
  add
    ? kernelSpec("rmsnorm_forward_add", forwardAddCode, { WG: wg, TPR: tpr }, "rmsnorm_forward")
    : kernelSpec("rmsnorm_forward", forwardCode, { WG: wg, TPR: tpr });
export const rmsnormBackwardSpec = (tpr: number, wg = WG): KernelSpec =>
  kernelSpec("rmsnorm_backward", backward, { WG: wg, TPR: tpr });
export const rmsnormBackwardDwSpec: KernelSpec = { name: "rmsnorm_backward_dw", code: backwardDw, overrides: { WG } };
export const rmsnormBackwardDwReduceSpec: KernelSpec = {
  name: "rmsnorm_backward_dw_reduce",
  code: backwardDwReduce,
  overrides: { WG },
};

/** "cpu": one thread a row in 64-thread workgroups; "gpu": about 4 elements a thread in 256-thread workgroups. */
export const RMSNORM_LAYOUTS = ["cpu", "gpu"] as const;
export type RmsnormLayout = (typeof RMSNORM_LAYOUTS)[number];

/** What start-up tuning (tune/kernels.ts) chooses for RMSNorm. */
export interface RmsnormTuning {
  layout: RmsnormLayout;
}

export interface RmsnormOptions {
  /** The row layout (default: the tuned one, else by the device's kind); the two below override it. */
  layout?: RmsnormLayout;
  tuning?: RmsnormTuning;
  /** Threads sharing one row: a power of two up to the workgroup size. */
  threadsPerRow?: number;
  /** Threads per workgroup: a power of two up to 256. */
  workgroupSize?: number;
}

/**
 * The row layout: as chosen (tuned), else by device kind: on real GPUs about 4 elements
 * per thread and 256-thread workgroups; on CPU implementations (SwiftShader) one thread per row, where barriers cost
 * more than the sums they share.
 */
export function rmsnormVariant(gpu: Gpu, C: number, opts: RmsnormOptions = {}): { tpr: number; wg: number } {
  const layout = opts.layout ?? opts.tuning?.layout ?? (isCpuDevice(gpu) ? "cpu" : "gpu");
  const cpu = layout === "cpu";
  const wg = opts.workgroupSize ?? (cpu ? 64 : WG);
  const tpr = opts.threadsPerRow ?? (cpu ? 1 : Math.min(wg, 2 ** Math.ceil(Math.log2(Math.max(1, Math.ceil(C / 4))))));
  const pow2 = (v: number) => Number.isInteger(v) && v >= 1 && Number.isInteger(Math.log2(v));
  if (!pow2(wg) || wg > WG || !pow2(tpr) || tpr > wg) {
    throw new Error(`rmsnorm: threadsPerRow ${tpr} and workgroupSize ${wg} must be powers of two, tpr <= wg <= ${WG}`);
  }
  return { tpr, wg };
}

function need(what: string, b: Binding, bytes: number): void {
  const size = "buffer" in b ? (b.size ?? b.buffer.size - (b.offset ?? 0)) : b.size;
  if (size < bytes) throw new Error(`rmsnorm: ${what} holds ${size} bytes, needs ${bytes}`);
}

export interface RmsnormBuffers {
  x: Binding; // (rows, C)
  w: Binding; // (C)
  y: Binding; // (rows, C) out
  rstd: Binding; // (rows) out, for the backward
  /** (rows, C): when given, y = add + x * rstd * w (a residual plus its normed branch, as Gemma's); not y itself. */
  add?: Binding;
}

export interface RmsnormDims {
  rows: number;
  C: number;
}

/** y = x * rstd * w (+ add) for x (rows, C), w (C); writes y (rows, C) and rstd (rows) for the backward. */
export function rmsnormForward(
  gpu: Gpu,
  rec: Recorder,
  { x, w, y, rstd, add }: RmsnormBuffers,
  { rows, C, eps }: RmsnormDims & { eps: number },
  opts: RmsnormOptions = {},
): void {
  if (rows === 0) return;
  const { tpr, wg } = rmsnormVariant(gpu, C, opts);
  need("x", x, rows * C * 4);
  need("w", w, C * 4);
  need("y", y, rows * C * 4);
  need("rstd", rstd, rows * 4);
  if (add) need("add", add, rows * C * 4);
  const groups = Math.ceil(rows / (wg / tpr));
  const bindings = add ? [x, w, y, rstd, add] : [x, w, y, rstd];
  rec.dispatch(rmsnormForwardSpec(tpr, wg, !!add), bindings, gpu.grid(groups), new Params().u32(rows, C).f32(eps));
}

export interface RmsnormBackwardBuffers {
  x: Binding; // (rows, C)
  w: Binding; // (C)
  rstd: Binding; // (rows), from the forward
  dy: Binding; // (rows, C)
  dx: Binding; // (rows, C)
  /** (C): when given, the weight gradient is computed too. */
  dw?: Binding;
}

export interface RmsnormBackwardOptions extends RmsnormOptions {
  /** dx += ... instead of dx = ... (the residual stream sums gradients). */
  accumulate?: boolean;
  /** dw += ... instead of dw = ... (micro-batches sum into one gradient). */
  accumulateDw?: boolean;
}

/** dx (and dw when `b.dw` is given) from dy. dw is a deterministic two-stage sum over rows. */
export function rmsnormBackward(
  gpu: Gpu,
  rec: Recorder,
  b: RmsnormBackwardBuffers,
  { rows, C }: RmsnormDims,
  opts: RmsnormBackwardOptions = {},
): void {
  if (rows === 0) return;
  const { tpr, wg } = rmsnormVariant(gpu, C, opts);
  need("x", b.x, rows * C * 4);
  need("w", b.w, C * 4);
  need("rstd", b.rstd, rows * 4);
  need("dy", b.dy, rows * C * 4);
  need("dx", b.dx, rows * C * 4);
  const groups = Math.ceil(rows / (wg / tpr));
  const params = new Params().u32(rows, C, opts.accumulate ? 1 : 0);
  rec.dispatch(rmsnormBackwardSpec(tpr, wg), [b.x, b.w, b.rstd, b.dy, b.dx], gpu.grid(groups), params);
  if (!b.dw) return;
  need("dw", b.dw, C * 4);
  // Blocks of >= 32 rows, at most 256 of them: enough parallel work in stage 1, a short stage 2.
  const rowsPerBlock = Math.max(32, Math.ceil(rows / 256));
  const blocks = Math.ceil(rows / rowsPerBlock);
  const colGroups = Math.ceil(C / WG);
  const partial = gpu.buffer(blocks * C * 4, "activations", "rmsnorm dw partial");
  rec.dispatch(
    rmsnormBackwardDwSpec,
    [b.x, b.rstd, b.dy, partial],
    gpu.grid(blocks * colGroups),
    new Params().u32(rows, C, rowsPerBlock, blocks, colGroups),
  );
  rec.dispatch(
    rmsnormBackwardDwReduceSpec,
    [partial, b.dw],
    gpu.grid(colGroups),
    new Params().u32(C, blocks, opts.accumulateDw ? 1 : 0),
  );
  gpu.release(partial); // the pool keeps it until this recorder is submitted
}
