// `npm run bench -- memory`: the memory planner against the engine's accounting. For each model, the planned
// and the measured peak live bytes of the largest inference step and of a LoRA GRPO step (rank 8, all
// targets), with recompute off and on, and the step time with recompute on over off. Real shapes (full width
// and vocabulary, random bf16 weights) run with 2 layers; the plan's per-layer term extrapolates to full depth. Each
// phase also reports the largest buffer it asked for over the plan's largest binding (at most 1). A decode run (8 steps
// replaying the captured one, ModelRunner.decode) is a phase of its own, beside the largest step.
// On a CPU device (SwiftShader) the GRPO step is 2 x 64 tokens instead of 8 x 512 (too slow otherwise).
import {
  Engine,
  LORA_TARGETS,
  measureDecodeRun,
  measureGrpoStep,
  measureInference,
  parseConfig,
  planMemory,
  type PlanSetup,
} from "@webart/engine";
import { isCpuDevice } from "@webart/gpu";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";
import { configJson, randomModelFiles, TINY } from "./models.ts";

const GiB = 2 ** 30;

export const memorySuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const out: BenchResult[] = [];
  const cpu = isCpuDevice(ctx.gpu);
  const [B, T] = cpu || ctx.quick ? [2, 64] : [8, 512];
  const kvSlots = 8;
  const maxContext = 1024;
  const prefillChunk = 256;
  const all = ["webart-tiny", "webart-20m", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b", "qwen2.5-1.5b"];
  // WEBART_BENCH_MODELS=a,b runs only those (the real shapes take minutes each on a CPU device).
  const only = process.env.WEBART_BENCH_MODELS?.split(",").map((s) => s.trim());
  const names = only ? all.filter((n) => only.includes(n)) : ctx.quick ? all.slice(0, 2) : all;
  ctx.log(
    `GRPO step: ${B} x ${T} tokens, LoRA rank 8 on ${LORA_TARGETS.join(",")}; KV ${kvSlots} x ${maxContext}, prefill chunk ${prefillChunk}`,
  );
  ctx.log(
    `${"model".padEnd(14)} ${"phase".padEnd(16)} ${"plan MiB".padStart(9)} ${"measured".padStart(9)} ${"ratio".padStart(6)}  ${"act. plan".padStart(9)} ${"act. meas".padStart(9)} ${"ratio".padStart(6)}  time s`,
  );
  for (const name of names) {
    const real = name !== "webart-tiny" && name !== "webart-20m";
    const source = name === "webart-tiny" ? TINY : randomModelFiles(configJson(name, real ? 2 : undefined));
    const engine = await Engine.load(source, { gpu: ctx.gpu, kvSlots, maxContext, prefillChunk, name });
    try {
      engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
      const c = engine.config;
      const setup: PlanSetup = {
        weightBytes: c.torchDtype === "float32" ? 4 : 2,
        kvSlots,
        kvContext: maxContext,
        prefillChunk,
        vocabChunk: 8192,
        lora: { rank: 8, targets: LORA_TARGETS },
        loraGradChunk: engine.planSetup.loraGradChunk, // the device's LoRA layout (GPUs split gradient sums)
        ropeInMatvec: engine.planSetup.ropeInMatvec,
        mergeLora: engine.planSetup.mergeLora, // inference on an f32 copy with the adapter merged in, where it runs
        // As this device's tuned kernels run: matvecs up to decodeRows rows, split-KV and the sampler's partials.
        decodeRows: engine.planSetup.decodeRows,
        splitKvTarget: engine.planSetup.splitKvTarget,
        sampleSplit: engine.planSetup.sampleSplit,
      };
      const row = (
        phase: string,
        plan: number,
        meas: number,
        actPlan: number,
        actMeas: number,
        largest: { planned: number; measured: number; what: string },
        s?: number,
      ) => {
        const mib = (b: number) => (b / 2 ** 20).toFixed(1).padStart(9);
        ctx.log(
          `${name.padEnd(14)} ${phase.padEnd(16)} ${mib(plan)} ${mib(meas)} ${(meas / plan).toFixed(3).padStart(6)}  ${mib(actPlan)} ${mib(actMeas)} ${(actMeas / actPlan).toFixed(3).padStart(6)}  ${s?.toFixed(2) ?? ""}`,
        );
        out.push({
          id: `memory.${name}.${phase}.measured_over_plan`,
          value: meas / plan,
          unit: "x",
          note: `plan ${(plan / 2 ** 20).toFixed(1)} MiB, measured ${(meas / 2 ** 20).toFixed(1)} MiB`,
        });
        out.push({
          id: `memory.${name}.${phase}.activations_measured_over_plan`,
          value: actMeas / actPlan,
          unit: "x",
          note: `above weights, adapter, optimizer and KV cache: plan ${actPlan} B, measured ${actMeas} B`,
        });
        // The largest buffer the step asked for, against the one the plan checks against the storage binding (at
        // most 1: the plan names what it checks).
        out.push({
          id: `memory.${name}.${phase}.largest_buffer_over_plan`,
          value: largest.measured / largest.planned,
          unit: "x",
          note: `${largest.measured} B asked; planned ${largest.planned} B (${largest.what})`,
        });
      };
      const inf = planMemory(c, setup);
      const before = ctx.gpu.pool.stats.liveBytes;
      const mi = await measureInference(engine, prefillChunk);
      const largest = (p: typeof inf, measured: number) => ({
        planned: p.largestBinding,
        measured,
        what: p.largestWhat,
      });
      // Inference is planned at the larger of a step (prefill chunk and decode rows) and a decode run: each phase
      // against its own part.
      const held = inf.peakInference - inf.inference;
      const step = [held + inf.inferenceStep, mi.peak, inf.inferenceStep, mi.peak - before] as const;
      row("inference", ...step, largest(inf, mi.largestBuffer));
      await measureDecodeRun(engine, 8); // its pipelines
      const beforeRun = ctx.gpu.pool.stats.liveBytes;
      const md = await measureDecodeRun(engine, 8);
      const run = [held + inf.decodeRun, md.peak, inf.decodeRun, md.peak - beforeRun] as const;
      row("decode_run", ...run, largest(inf, md.largestBuffer));
      const times: Record<string, number> = {};
      for (const recompute of [false, true]) {
        const p = planMemory(c, { ...setup, train: { microBatchTokens: B * T, recompute } });
        // A first step allocates the optimizer state; the measured one is the second.
        await measureGrpoStep(engine, { batch: B, length: T, microBatchTokens: B * T, recompute, vocabChunk: 8192 });
        const held = ctx.gpu.pool.stats.liveBytes;
        const m = await measureGrpoStep(engine, {
          batch: B,
          length: T,
          microBatchTokens: B * T,
          recompute,
          vocabChunk: 8192,
        });
        const phase = `grpo.${recompute ? "recompute" : "keep"}`;
        times[phase] = m.ms / 1000;
        row(phase, p.peakTraining, m.peak, p.training, m.peak - held, largest(p, m.largestBuffer), m.ms / 1000);
        if (real) {
          // Every further layer adds its weights, KV cache, LoRA + optimizer state and (kept) activations.
          const full = parseConfig(configJson(name));
          const pf = planMemory(full, { ...setup, train: { microBatchTokens: B * T, recompute } });
          const extra = full.numLayers - c.numLayers;
          const perLayer = (pf.peakTraining - p.peakTraining) / extra;
          ctx.log(
            `${"".padEnd(14)} at full depth (${full.numLayers} layers): ${(pf.peakTraining / GiB).toFixed(2)} GiB planned = 2-layer peak + ${extra} x ${(perLayer / 2 ** 20).toFixed(1)} MiB a layer (activations ${(pf.trainingPerLayer / 2 ** 20).toFixed(1)})`,
          );
          out.push({
            id: `memory.${name}.full.${phase}.plan_gib`,
            value: pf.peakTraining / GiB,
            unit: "GiB",
            note: `${full.numLayers} layers; ${(perLayer / 2 ** 20).toFixed(1)} MiB a layer`,
          });
        }
      }
      out.push({
        id: `memory.${name}.recompute_over_keep.time`,
        value: times["grpo.recompute"] / times["grpo.keep"],
        unit: "x",
        note: `${B}x${T} tokens`,
      });
      ctx.log(
        `${"".padEnd(14)} step time recompute / keep: ${(times["grpo.recompute"] / times["grpo.keep"]).toFixed(2)}`,
      );
    } finally {
      await engine.close();
    }
  }
  return out;
};
export default memorySuite;
