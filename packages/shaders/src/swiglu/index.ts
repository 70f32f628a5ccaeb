// SwiGLU for the gated MLP: h = silu(g) * u over (N, F) with g and u in separate buffers, and its backward.
import { Params, type Binding, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import forward from "./forward.wgsl";
import backward from "./backward.wgsl";

const WG = 256;
export const swigluForwardSpec: KernelSpec = { name: "swiglu_forward", code: forward, overrides: { WG } };
export const swigluBackwardSpec: KernelSpec = { name: "swiglu_backward", code: backward, overrides: { WG } };

/** h = silu(g) * u for n = N * F elements. */
export function swiglu(gpu: Gpu, rec: Recorder, g: Binding, u: Binding, h: Binding, n: number): void {
  rec.dispatch(swigluForwardSpec, [g, u, h], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
}

/** dg = dh * d(silu(g) * u)/dg and du = dh * silu(g) for n elements (both written, not accumulated). */
export function swigluBackward(
  gpu: Gpu,
  rec: Recorder,
  g: Binding,
  u: Binding,
  dh: Binding,
  dg: Binding,
  du: Binding,
  n: number,
): void {
  rec.dispatch(swigluBackwardSpec, [g, u, dh, dg, du], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
}
