// The gated MLP's activation: h = act(g) * u over (N, F), with g and u in separate buffers or side by side in the rows
// of one gate|up product (the *Packed forms), and its backward.
// act is silu (SwiGLU: Llama, Qwen, Mistral) or GELU's tanh approximation (GeGLU: Gemma's gelu_pytorch_tanh).
import { Params, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forward from "./forward.wgsl";
import backward from "./backward.wgsl";

const WG = 256;
export type GatedActivation = "silu" | "gelu_tanh";
const ACT: Record<GatedActivation, number> = { silu: 0, gelu_tanh: 1 };
const specs = (name: string, code: string) =>
  Object.fromEntries(
    Object.entries(ACT).map(([act, id]) => [act, { name, code, overrides: { WG, ACT: id } } as KernelSpec]),
  ) as Record<GatedActivation, KernelSpec>;
export const swigluForwardSpecs = specs("swiglu_forward", forward);
export const swigluBackwardSpecs = specs("swiglu_backward", backward);
const packedBackwardSpecs = specs("swiglu_backward_packed", backward);

export interface SwigluOptions {
  /** The gate's activation (default silu). */
  act?: GatedActivation;
}

/** h = act(g) * u for n = N * F elements (act: silu by default). */
export function swigluForward(
  gpu: Gpu,
  rec: Recorder,
  { g, u, h }: { g: Binding; u: Binding; h: Binding },
  { n }: { n: number },
  { act = "silu" }: SwigluOptions = {},
): void {
  rec.dispatch(swigluForwardSpecs[act], [g, u, h], gpu.grid(Math.ceil(n / WG)), tight(n));
}

/** Params for g and u in tight buffers of n elements: one row of n. */
const tight = (n: number) => new Params().u32(n, Math.max(1, n), n, 0, 0);
/** Params for the halves of gu (N, 2F): g at column 0, u at column F. */
const packed = (N: number, F: number) => new Params().u32(N * F, F, 2 * F, 0, F);

function checkPacked(what: string, gu: Binding, { N, F }: { N: number; F: number }): void {
  if (!Number.isInteger(N) || !Number.isInteger(F) || N < 1 || F < 1)
    throw new Error(`${what}: N = ${N} and F = ${F} must be positive integers`);
  const bytes = "buffer" in gu ? (gu.size ?? gu.buffer.size - (gu.offset ?? 0)) : gu.size;
  if (bytes < N * 2 * F * 4) throw new Error(`${what}: gu holds ${bytes} bytes, needs ${N * 2 * F * 4} (N, 2F)`);
}

/** h (N, F) = act(g) * u where gu (N, 2F) holds g and u side by side in each row (one gate|up product). */
export function swigluForwardPacked(
  gpu: Gpu,
  rec: Recorder,
  { gu, h }: { gu: Binding; h: Binding },
  dims: { N: number; F: number },
  { act = "silu" }: SwigluOptions = {},
): void {
  checkPacked("swigluForwardPacked", gu, dims);
  const n = dims.N * dims.F;
  rec.dispatch(swigluForwardSpecs[act], [gu, gu, h], gpu.grid(Math.ceil(n / WG)), packed(dims.N, dims.F));
}

/** dgu (N, 2F) = (dg | du) side by side, as gu holds g and u (written, not accumulated), from dh (N, F). */
export function swigluBackwardPacked(
  gpu: Gpu,
  rec: Recorder,
  { gu, dh, dgu }: { gu: Binding; dh: Binding; dgu: Binding },
  dims: { N: number; F: number },
  { act = "silu" }: SwigluOptions = {},
): void {
  checkPacked("swigluBackwardPacked", gu, dims);
  checkPacked("swigluBackwardPacked (dgu)", dgu, dims);
  const n = dims.N * dims.F;
  rec.dispatch(packedBackwardSpecs[act], [gu, gu, dh, dgu], gpu.grid(Math.ceil(n / WG)), packed(dims.N, dims.F));
}

export interface SwigluBackwardBuffers {
  g: Binding; // (N, F)
  u: Binding; // (N, F)
  dh: Binding; // (N, F)
  dg: Binding; // (N, F) out
  du: Binding; // (N, F) out
}

/** dg = dh * d(act(g) * u)/dg and du = dh * act(g) for n elements (both written, not accumulated). */
export function swigluBackward(
  gpu: Gpu,
  rec: Recorder,
  { g, u, dh, dg, du }: SwigluBackwardBuffers,
  { n }: { n: number },
  { act = "silu" }: SwigluOptions = {},
): void {
  rec.dispatch(swigluBackwardSpecs[act], [g, u, dh, dg, du], gpu.grid(Math.ceil(n / WG)), tight(n));
}
