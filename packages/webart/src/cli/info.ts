// `webart info`: the WebGPU device the engine gets in Node, its limits and features, and the memory budget the
// engine plans against on it when none is given.
import { defaultMemoryBudget, getDevice, isCpuDevice } from "@webart/engine";
import { parseOptions, type CommandSpec } from "./args.ts";

export const INFO = {
  name: "info",
  about:
    "Prints the WebGPU device the engine gets in Node (Dawn), its limits and features, and the engine's default\nmemory budget on it (train and serve take --memory-budget to change it).",
  options: {},
} satisfies CommandSpec;

export async function infoCommand(argv: string[]): Promise<number> {
  parseOptions(INFO, argv);
  const gpu = await getDevice();
  const { vendor, architecture, description, robustness } = gpu.kind;
  const cpu = isCpuDevice(gpu);
  const budget = defaultMemoryBudget({ browser: false, cpuDevice: cpu });
  console.log(`device:    ${vendor} ${architecture} (${description})${cpu ? ", a CPU implementation" : ""}`);
  console.log(`features:  ${[...gpu.features].sort().join(", ")}`);
  console.log(`max storage binding: ${gpu.limits.maxStorageBufferBindingSize / 2 ** 20} MiB`);
  console.log(`robustness: ${robustness ? "on" : "off (Node default, faster)"}`);
  console.log(
    `memory budget: ${budget / 2 ** 30} GiB (the default on ${cpu ? "a CPU device" : "a GPU"}; --memory-budget changes it)`,
  );
  return 0;
}
