// Which kind of WebGPU implementation a device runs on, for the kernels' layout choices.
import type { Gpu } from "./device.ts";

/** Architectures of CPU implementations of WebGPU (SwiftShader, Mesa's llvmpipe/lavapipe, WARP). */
const CPU_ARCH = /swiftshader|llvmpipe|lavapipe|warp/i;

/**
 * True on a CPU implementation, where a workgroup's invocations run as a few 4-wide SIMD groups that switch at every
 * barrier and workgroup memory is no faster than storage: fewer threads and no sharing win there, while real GPUs
 * want big workgroups that share tiles. False on a device made with DeviceOptions.asGpu, whatever its adapter.
 */
export function isCpuDevice(gpu: Gpu): boolean {
  let cpu = known.get(gpu);
  if (cpu === undefined)
    known.set(gpu, (cpu = !gpu.asGpu && CPU_ARCH.test(`${gpu.kind.architecture} ${gpu.kind.description}`)));
  return cpu;
}
/** Asked for every kernel a step records: answered once per device. */
const known = new WeakMap<Gpu, boolean>();
