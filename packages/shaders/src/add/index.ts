// Residual add y = a + b over n f32 values (the gradient of a sum passes through unchanged,
// so there is no backward kernel).
import { Params, type Recorder, type Gpu, type KernelSpec } from "@webart/gpu";
import code from "./forward.wgsl";

const WG = 256;
export const addForward: KernelSpec = { name: "add_forward", code, overrides: { WG } };

export function add(gpu: Gpu, rec: Recorder, a: GPUBuffer, b: GPUBuffer, y: GPUBuffer, n: number): void {
  rec.dispatch(addForward, [a, b, y], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
}
