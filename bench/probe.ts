// The device probe: info, limits, features, measured FMA peak (GFLOP/s) and copy bandwidth (GB/s) (the kernels:
// @webart/shaders' probe). Every later benchmark reports its figures as a fraction of these, measured in the same run.
import type { Gpu } from "@webart/gpu";
import { measurePeak as devicePeak } from "@webart/shaders";
import type { BenchResult, Peak } from "./harness.ts";

export async function measurePeak(gpu: Gpu, quick = false): Promise<{ peak: Peak; results: BenchResult[] }> {
  const p = await devicePeak(gpu, { quick });
  const peak = { fma_gflops: p.fmaGflops, copy_gbps: p.copyGbps };
  return {
    peak,
    results: [
      {
        id: "probe.fma",
        value: p.fmaGflops,
        unit: "GFLOP/s",
        note: `${p.fma.threads} threads x ${p.fma.iters} x 16 FMA`,
      },
      {
        id: "probe.copy",
        value: p.copyGbps,
        unit: "GB/s",
        note: `${p.copy.bytes >> 20} MiB read + written${p.copy.reps > 1 ? `, ${p.copy.reps} copies a submit` : ""}`,
      },
    ],
  };
}

export function deviceReport(gpu: Gpu): Record<string, unknown> {
  const limits: Record<string, number> = {};
  for (const k of [
    "maxStorageBufferBindingSize",
    "maxBufferSize",
    "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup",
    "maxComputeWorkgroupSizeX",
    "maxComputeWorkgroupsPerDimension",
    "maxStorageBuffersPerShaderStage",
  ] as const) {
    limits[k] = gpu.limits[k];
  }
  return {
    ...gpu.kind,
    ...(gpu.asGpu ? { asGpu: true } : {}),
    features: [...gpu.features].sort(),
    limits,
    notes: gpu.notes,
  };
}
