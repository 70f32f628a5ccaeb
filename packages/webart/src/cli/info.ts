// `webart info`: the WebGPU device the engine gets in Node, its limits and features, and the memory budget the
// engine plans against on it when none is given; with --speed, how fast a model runs on it (measureSpeed).
import {
  DEFAULT_TRAIN_CONFIG,
  defaultMemoryBudget,
  defaultTuneCache,
  Engine,
  getDevice,
  isCpuDevice,
  LORA_TARGETS,
  measureSpeed,
  speedLines,
  savedChoices,
} from "@webart/engine";
import { bytes, parseOptions, quantizeOption, UsageError, type CommandSpec } from "./args.ts";

export const INFO = {
  name: "info",
  about:
    "Prints the WebGPU device the engine gets in Node (Dawn), its limits and features, and the engine's default\n" +
    "memory budget on it (train and serve take --memory-budget to change it). With --speed it loads a model and\n" +
    "measures it there: the device's FMA peak and copy bandwidth, prefill and decode tokens/s (batch 1 against\n" +
    "the copy roofline), a LoRA GRPO step of 8 x 512 tokens (time, tokens/s, peak memory against the plan),\n" +
    "whether tensor cores are used, and the kernels start-up tuning chose.",
  options: {
    speed: { flag: true, help: "load --model and measure how fast it runs on this device" },
    model: {
      arg: "DIR|URL|ID",
      default: "webart-tiny",
      help: "with --speed: the model to measure (a Hugging Face folder, URL or repo id; the embedded\nwebart-tiny or webart-tools)",
    },
    quantize: { arg: "q4", help: "with --speed: the model's weights as 4-bit ones, as train --quantize q4 runs them" },
    quick: {
      flag: true,
      help: "with --speed: short timings, a 64-token prompt and a GRPO step of 2 x 64 tokens (a first look\non a CPU device)",
    },
    "memory-budget": { arg: "SIZE", help: "with --speed: GPU memory the engine may plan for, e.g. 6GB" },
  },
} satisfies CommandSpec;

export async function infoCommand(argv: string[]): Promise<number> {
  const a = parseOptions(INFO, argv);
  if (!a.speed) {
    for (const k of ["quantize", "quick", "memory-budget"] as const)
      if (a[k]) throw new UsageError(`--${k} is for --speed (webart info --speed --${k} ...)`);
    if (a.model !== INFO.options.model.default) throw new UsageError("--model is for --speed");
  }
  const quantize = quantizeOption(a.quantize);
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
  const cache = await defaultTuneCache();
  const kept = cache ? await savedChoices(gpu, cache) : 0;
  console.log(
    cache
      ? `tuning cache: ${cache.where} (${kept} start-up tuning choices for this device and build; WEBART_TUNING_CACHE=off measures afresh)`
      : "tuning cache: off (WEBART_TUNING_CACHE)",
  );
  if (!a.speed) return 0;
  // 8 sequences of a short context: the check's decode batches and its prompt, no more KV cache than that. Training
  // is planned with the load, as a run's is (rank 8 on every projection), and timed on an adapter of its own.
  const memoryBudget = bytes("memory-budget", a["memory-budget"]);
  const lora = { rank: 8, targets: [...LORA_TARGETS] };
  const engine = await Engine.load(a.model, {
    gpu,
    quantize,
    memoryBudget,
    kvSlots: 8,
    maxContext: 512,
    name: a.model,
    train: { lora, microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens },
  });
  try {
    engine.attachLora(lora);
    console.log(`\nspeed of ${a.model} on this device${a.quick ? " (--quick)" : ""}:`);
    const train = a.quick ? { batch: 2, length: 64 } : { batch: 8, length: 512 };
    for (const line of speedLines(await measureSpeed(engine, { quick: a.quick, train }), ["device"])) console.log(line);
  } finally {
    await engine.close();
  }
  return 0;
}
