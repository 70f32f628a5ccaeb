import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu } from "@webart/gpu";
import { fmaExpected, measurePeak } from "./index.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

it("measures the FMA peak and copy bandwidth with outputs the CPU predicts, and gives its buffers back", async () => {
  const live = gpu.memory.liveBytes;
  const p = await measurePeak(gpu, { quick: true }); // throws where an output differs from the CPU's
  expect(p.fmaGflops).toBeGreaterThan(0);
  expect(p.copyGbps).toBeGreaterThan(0);
  expect(Number.isFinite(p.fmaGflops + p.copyGbps)).toBe(true);
  expect(p.fma).toEqual({ threads: 32 * 256, iters: 256 });
  expect(p.copy).toEqual({ bytes: 8 * 2 ** 20, reps: 1 });
  expect(gpu.memory.liveBytes).toBe(live);
  const bounded = await measurePeak(gpu, { quick: true, maxCopyBytes: 2 ** 20 });
  expect(bounded.copy.bytes).toBe(2 ** 20);
});

it("predicts the FMA chains as f32 does: a fixed point of a * 0.9999 + 0.0001 near 1", () => {
  // The chains converge toward 1 from below: 4 chains a lane, so each lane's sum approaches 4.
  const [short, long] = [fmaExpected(5, 16), fmaExpected(5, 100_000)];
  for (let l = 0; l < 4; l++) {
    expect(long[l]).toBeGreaterThan(short[l]);
    expect(Math.abs(long[l] - 4)).toBeLessThan(1e-2);
  }
});
