// Shared by every bench suite: the result shape written to bench/results/<suite>.json, and GPU timing.
import type { KernelTuning } from "@webart/shaders";
import type { DeviceOptions, Gpu, Recorder } from "@webart/gpu";

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

/**
 * Median wall time in ms of one submit of the work `record` puts in a recorder, waiting for the
 * GPU each time. Warms up first (pipelines compiled, buffers pooled), then repeats until `minMs`.
 */
export async function timeGpu(
  gpu: Gpu,
  record: (rec: Recorder) => void,
  opts: { warmup?: number; minMs?: number; minReps?: number; maxReps?: number } = {},
): Promise<number> {
  const { warmup = 1, minMs = 300, minReps = 3, maxReps = 50 } = opts;
  const once = async () => {
    const rec = gpu.recorder();
    record(rec);
    const t0 = performance.now();
    await rec.submit();
    await gpu.sync();
    return performance.now() - t0;
  };
  for (let i = 0; i < warmup; i++) await once();
  const times: number[] = [];
  let total = 0;
  while ((times.length < minReps || total < minMs) && times.length < maxReps) {
    const t = await once();
    times.push(t);
    total += t;
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}
