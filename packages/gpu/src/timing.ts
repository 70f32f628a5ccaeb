// Wall-clock timing of GPU work from the host, for the bench and the engine's speed check.
import type { Gpu, Recorder } from "./device.ts";

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
