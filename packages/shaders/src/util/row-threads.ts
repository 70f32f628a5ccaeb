// Which kind of WebGPU implementation a device runs on, for the kernels' layout choices.
import { isCpuDevice, type Gpu, type KernelSpec } from "@webart/gpu";

/** Threads per row they are measured at: fewer than 8 would leave each thread too long an f32 sum at V = 151936. */
export const ROW_THREADS = ["8", "64", "256"] as const;

/** What start-up tuning (tune/kernels.ts) chooses for a kernel that reduces each row in one workgroup. */
export interface RowTuning {
  /** Threads per row: one of ROW_THREADS. */
  threads: number;
}

/**
 * Threads per row for a kernel that reduces each row in one workgroup (sampling, token logprobs): the tuned count,
 * else 256 on GPUs and 8 on CPU implementations, where each barrier switches between the workgroup's SIMD groups
 * and costs more than the sums it shares.
 */
export function rowThreads(gpu: Gpu, tuning?: RowTuning): number {
  return tuning?.threads ?? (isCpuDevice(gpu) ? 8 : 256);
}

/** A row kernel's spec at `wg` threads (a power of two, 8..256), one object per size so pipelines are found fast. */
export function rowSpecs(name: string, code: string): (wg: number) => KernelSpec {
  const specs = new Map<number, KernelSpec>();
  return (wg) => {
    if (!(wg >= 8 && wg <= 256 && (wg & (wg - 1)) === 0))
      throw new RangeError(`${name}: workgroup size ${wg} must be a power of two in [8, 256]`);
    let s = specs.get(wg);
    if (!s) specs.set(wg, (s = { name, code, overrides: { WG: wg } }));
    return s;
  };
}
