// Which kind of WebGPU implementation a device runs on, for the kernels' layout choices.
import type { Gpu } from "./device.ts";

/** Architectures of CPU implementations of WebGPU (SwiftShader, Mesa's llvmpipe/lavapipe, WARP). */
const CPU_ARCH = /swiftshader|llvmpipe|lavapipe|warp/i;

/**
 * True on a CPU implementation, where a workgroup's invocations run as a few 4-wide SIMD groups that switch at
 * every barrier and workgroup memory is no faster than storage: fewer threads and no sharing win there, while real
 * GPUs want big workgroups that share tiles.
 */
export function isCpuDevice(gpu: Gpu): boolean {
  let cpu = known.get(gpu);
  if (cpu === undefined) known.set(gpu, (cpu = CPU_ARCH.test(`${gpu.kind.architecture} ${gpu.kind.description}`)));
  return cpu;
}
/** Asked for every kernel a step records: answered once per device. */
const known = new WeakMap<Gpu, boolean>();

/**
 * A buffer's size in bytes. `GPUBuffer.size` is a native getter (~75 ns on Dawn in Node) and kernels check every
 * binding's size on every dispatch; sizes never change, so each is read once.
 */
export function sizeOf(buf: GPUBuffer): number {
  let n = sizes.get(buf);
  if (n === undefined) sizes.set(buf, (n = buf.size));
  return n;
}
const sizes = new WeakMap<GPUBuffer, number>();
