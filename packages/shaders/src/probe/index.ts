// The device's yardsticks: measured FMA peak (GFLOP/s) and copy bandwidth (GB/s), each kernel's output checked
// against the CPU first. The bench reports its figures as fractions of these, measured in the same run; the
// engine's speed check (Engine.speed) puts a model's decode against the copy bandwidth.
import { Params, isCpuDevice, timeGpu, type Gpu } from "@webart/gpu";
import code from "./probe.wgsl";

const WG = 256;

export interface DevicePeak {
  fmaGflops: number;
  copyGbps: number;
  /** What was timed: threads x iterations x 16 FMA; bytes read and written, copies a submit. */
  fma: { threads: number; iters: number };
  copy: { bytes: number; reps: number };
}

/** The CPU's prediction of probe_fma's output for thread `t` (f32 rounding per step, mul+add). */
export function fmaExpected(t: number, iters: number): number[] {
  const f = Math.fround;
  const seed = f((t % 1024) * f(1e-4));
  const out = [0, 0, 0, 0];
  for (let lane = 0; lane < 4; lane++) {
    for (const off of [0, 0.05, 0.11, 0.17]) {
      let a = f(f(seed + f(0.1 * lane)) + f(off));
      for (let i = 0; i < iters; i++) a = f(f(a * f(0.9999)) + f(0.0001));
      out[lane] = f(out[lane] + a);
    }
  }
  return out;
}

/**
 * Times the FMA chains and a copy larger than the device's caches. `quick`: small sizes and short timings (tests,
 * smoke runs). `maxCopyBytes`: a bound on the copy's source (its destination is as large), for a device whose memory
 * holds other work. Throws, naming the kernel, thread and value, where a kernel's output is not what the CPU predicts.
 */
export async function measurePeak(
  gpu: Gpu,
  { quick = false, maxCopyBytes = Infinity }: { quick?: boolean; maxCopyBytes?: number } = {},
): Promise<DevicePeak> {
  // FMA peak: 16 independent FMA chains (4 vec4) per thread. A GPU gets enough threads to fill every core
  // (2048 groups of 256: ~4 per SM slot on a 132-SM H100) and a copy larger than its cache, several a submit.
  const gpuSized = !quick && !isCpuDevice(gpu);
  const iters = quick ? 256 : gpuSized ? 1024 : 2048;
  const groups = quick ? 32 : gpuSized ? 2048 : 128;
  const threads = groups * WG;
  const out = gpu.buffer(threads * 16, "bench");
  const fma = { name: "probe_fma", code, overrides: { WG } };
  const params = new Params().u32(iters, threads);
  let ms: number;
  try {
    ms = await timeGpu(gpu, (rec) => rec.dispatch(fma, [out], groups, params), { minMs: quick ? 50 : 500 });
    const got = await gpu.readF32(out, threads * 4);
    for (const t of [0, 1, 777, threads - 1]) {
      const want = fmaExpected(t, iters);
      for (let l = 0; l < 4; l++) {
        const g = got[t * 4 + l];
        if (!(Math.abs(g - want[l]) <= 1e-3 * Math.abs(want[l]) + 1e-4)) {
          throw new Error(
            `probe_fma: thread ${t} lane ${l} = ${g}, expected ${want[l]}: the peak kernel is miscompiled`,
          );
        }
      }
    }
  } finally {
    gpu.release(out);
  }
  const fmaGflops = (threads * iters * 16 * 2) / (ms * 1e6);

  // Copy bandwidth: read + write of a buffer larger than any cache.
  const bytes = Math.min(
    gpuSized ? Math.min(1024 * 2 ** 20, gpu.maxStorageBinding, gpu.maxBufferSize) : (quick ? 8 : 64) * 2 ** 20,
    maxCopyBytes,
  );
  const reps = gpuSized ? 4 : 1;
  const n = Math.floor(bytes / 16);
  const srcData = new Float32Array(n * 4);
  for (let i = 0; i < srcData.length; i += 1021) srcData[i] = i;
  const src = gpu.upload(srcData, "bench");
  const dst = gpu.buffer(n * 16, "bench");
  let cms: number;
  try {
    const copy = { name: "probe_copy", code, overrides: { WG } };
    cms =
      (await timeGpu(
        gpu,
        (rec) => {
          for (let r = 0; r < reps; r++) rec.dispatch(copy, [src, dst], gpu.grid(Math.ceil(n / WG)));
        },
        { minMs: quick ? 50 : 500 },
      )) / reps;
    const back = await gpu.readF32(dst);
    for (let i = 0; i < srcData.length; i += 1021) {
      if (back[i] !== srcData[i]) throw new Error(`probe_copy: element ${i} = ${back[i]}, expected ${srcData[i]}`);
    }
  } finally {
    gpu.release(src, dst);
  }
  return {
    fmaGflops,
    copyGbps: (2 * n * 16) / (cms * 1e6),
    fma: { threads, iters },
    copy: { bytes: n * 16, reps },
  };
}
