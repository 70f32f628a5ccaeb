// The gated MLP's activation: h = act(g) * u over (N, F) with g and u in separate buffers, and its backward.
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
  rec.dispatch(swigluForwardSpecs[act], [g, u, h], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
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
  rec.dispatch(swigluBackwardSpecs[act], [g, u, dh, dg, du], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
}
