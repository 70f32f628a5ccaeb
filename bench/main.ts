// `npm run bench -- <suite> [--quick]`: runs the probe, then the suite, prints a table and writes
// bench/results/<suite>.json. Suites register themselves in SUITES; `learning` (bench/learning.ts) runs the CLI.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createDevice, getDevice, releaseDawn, type DeviceOptions } from "@webart/gpu";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";
import { deviceReport, measurePeak } from "./probe.ts";

// Every load measures its start-up tuning (the suites time loads with it), rather than reading a table a run
// before this one saved (EngineOptions.tuneCache); WEBART_TUNING_CACHE set for the bench overrides it.
process.env.WEBART_TUNING_CACHE ??= "off";

const SUITES: Record<string, () => Promise<Suite>> = {
  probe: async () => async () => [],
  kernels: async () => {
    const [{ tuneSuite }, { matmulSuite }, { attentionSuite }, { smallSuite }] = await Promise.all([
      import("./kernels/tune.ts"),
      import("./kernels/matmul.ts"),
      import("./kernels/attention.ts"),
      import("./kernels/small.ts"),
    ]);
    // Start-up tuning first, as Engine.load does: the kernels then run what it measured fastest here.
    return async (ctx) => [
      ...(await tuneSuite(ctx)),
      ...(await matmulSuite(ctx)),
      ...(await attentionSuite(ctx)),
      ...(await smallSuite(ctx)),
    ];
  },
  generate: async () => (await import("./generate.ts")).generateSuite,
  gpu: async () => (await import("./gpu.ts")).gpuSuite,
  train: async () => (await import("./train.ts")).trainSuite,
  polling: async () => (await import("./polling.ts")).pollingSuite,
  memory: async () => (await import("./memory.ts")).memorySuite,
  serve: async () => (await import("./serve.ts")).serveSuite,
  constrain: async () => (await import("./constrain.ts")).constrainSuite,
};

export function registerSuite(name: string, load: () => Promise<Suite>): void {
  SUITES[name] = load;
}

function table(rows: BenchResult[]): string {
  const lines = rows.map((r) => [
    r.id,
    `${r.value.toPrecision(4)} ${r.unit}`,
    r.fraction_of_peak !== undefined ? `${(100 * r.fraction_of_peak).toFixed(1)}% of peak` : "",
    r.vs ? `${r.vs.ratio.toFixed(2)}x vs ${r.vs.id}` : "",
    r.note ?? "",
  ]);
  const w = [0, 1, 2, 3].map((i) => Math.max(...lines.map((l) => l[i].length), 4));
  return lines.map((l) => l.map((c, i) => (i < 4 ? c.padEnd(w[i]) : c)).join("  ")).join("\n");
}

export async function runBench(name: string, quick: boolean): Promise<Record<string, unknown>> {
  const load = SUITES[name];
  if (!load) throw new Error(`bench: unknown suite "${name}" (available: ${Object.keys(SUITES).join(", ")})`);
  // WEBART_BENCH_AS_GPU=1: a CPU implementation treated as a GPU (DeviceOptions.asGpu), to run a GPU's paths of a
  // suite where no GPU is (slowly; its timings mean nothing).
  const asGpu = !!process.env.WEBART_BENCH_AS_GPU;
  const gpu = await getDevice({ asGpu });
  const device = deviceReport(gpu);
  console.log(`device: ${JSON.stringify(device, null, 1).replace(/\n\s*/g, " ")}`);
  const { peak, results: probe } = await measurePeak(gpu, quick);
  console.log(`peak: ${peak.fma_gflops.toFixed(2)} GFLOP/s FMA, ${peak.copy_gbps.toFixed(2)} GB/s copy`);
  const ctx: BenchContext = {
    gpu,
    peak,
    quick,
    device: (opts: DeviceOptions) => createDevice({ asGpu, ...opts }),
    log: (l) => console.log(l),
  };
  const suite = await load();
  const results = name === "probe" ? probe : await suite(ctx);
  console.log(`\n${name}\n${table(results)}`);
  const info = device as { vendor: string; architecture: string; description: string };
  return {
    suite: name,
    device: { vendor: info.vendor, architecture: info.architecture, description: info.description },
    ...(name === "probe" ? { details: device } : {}),
    peak,
    results,
    date: new Date().toISOString(),
  };
}

async function main() {
  const args = process.argv.slice(2);
  const quick = args.includes("--quick");
  const name = args.find((a) => !a.startsWith("--")) ?? "probe";
  // The learning suite trains and evaluates through the CLI in child processes: no probe, no device here.
  const report =
    name === "learning"
      ? await (async () => {
          const { learningBench, learningOptions } = await import("./learning.ts");
          return learningBench(learningOptions(args.slice(args.indexOf(name) + 1)));
        })()
      : await runBench(name, quick);
  const dir = join(dirname(fileURLToPath(import.meta.url)), "results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(report, null, 2) + "\n");
  console.log(`\nwrote ${file}`);
  releaseDawn();
  process.exit(0);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
