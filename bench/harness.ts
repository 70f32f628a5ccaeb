// Shared by every bench suite: the result shape written to bench/results/<suite>.json, and GPU timing.
import type { KernelTuning } from "@webart/shaders";
import type { DeviceOptions, Gpu } from "@webart/gpu";

export interface BenchResult {
  /** Dotted, stable id: op.dtype.size, e.g. "matmul.f32.1024". */
  id: string;
  value: number;
  unit: string;
  fraction_of_peak?: number;
  vs?: { id: string; ratio: number };
  note?: string;
}

export interface Peak {
  fma_gflops: number;
  copy_gbps: number;
}

export interface BenchContext {
  /** The engine's default device for Node (robustness off). */
  gpu: Gpu;
  /** Measured by the probe in this same run. */
  peak: Peak;
  /** Another device with other settings, e.g. { robustness: true } as browsers have. */
  device(opts: DeviceOptions): Promise<Gpu>;
  /** Smaller sizes and fewer repetitions (used by the bench's own smoke test). */
  quick: boolean;
  log(line: string): void;
  /** The kernel choices start-up tuning made in this run (the kernels suite's first part sets it); none: defaults. */
  tuning?: KernelTuning;
}

export type Suite = (ctx: BenchContext) => Promise<BenchResult[]>;

export { timeGpu } from "@webart/gpu";
