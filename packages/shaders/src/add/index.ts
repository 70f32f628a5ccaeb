// Residual add y = a + b over n f32 values (the gradient of a sum passes through unchanged,
// so there is no backward kernel).
import { Params, type Recorder, type Gpu, type KernelSpec } from "@webart/gpu";
import code from "./forward.wgsl";

const WG = 256;
export const addSpec: KernelSpec = { name: "add_forward", code, overrides: { WG } };

/** y = a + b, all (n). */
export function add(
  gpu: Gpu,
  rec: Recorder,
  { a, b, y }: { a: GPUBuffer; b: GPUBuffer; y: GPUBuffer },
  { n }: { n: number },
): void {
  rec.dispatch(addSpec, [a, b, y], gpu.grid(Math.ceil(n / WG)), new Params().u32(n));
}
