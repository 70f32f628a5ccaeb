// Runs the matmul suite without the bench runner: `node --import tsx --import ./scripts/wgsl-loader.mjs
// bench/kernels/try-matmul.ts [--quick] [--probe]` (--probe measures the FMA peak, else 3.5 is assumed).
import { createDevice, getDevice, releaseDawn } from "@webart/gpu";
import type { BenchContext } from "../harness.ts";
import { measurePeak } from "../probe.ts";
import { matmulSuite } from "./matmul.ts";

const quick = process.argv.includes("--quick");
const gpu = await getDevice();
const peak = process.argv.includes("--probe")
  ? (await measurePeak(gpu, quick)).peak
  : { fma_gflops: 3.5, copy_gbps: 1 };
console.log(`device ${gpu.kind.description} (${gpu.kind.architecture}), peak ${peak.fma_gflops.toFixed(2)} GFLOP/s`);
const ctx: BenchContext = { gpu, peak, quick, device: (o) => createDevice(o), log: (l) => console.log(l) };
for (const r of await matmulSuite(ctx)) {
  const extra = [
    r.fraction_of_peak !== undefined ? `${(100 * r.fraction_of_peak).toFixed(1)}% of peak` : "",
    r.vs ? `${r.vs.ratio.toFixed(2)}x vs ${r.vs.id}` : "",
    r.note ?? "",
  ];
  console.log(
    `${r.id.padEnd(28)} ${r.value.toPrecision(4).padStart(8)} ${r.unit.padEnd(8)} ${extra.filter(Boolean).join("  ")}`,
  );
}
releaseDawn();
process.exit(0);
