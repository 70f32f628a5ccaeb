// The speed check: how fast a loaded engine runs on this device, measured there and then (`webart info --speed`, the
// web app's "Speed on this GPU"). The device's FMA peak and copy bandwidth, then prefill and decode through the
// engine's own model runner and KV cache (slots no request holds), as the scheduler runs them.
import { isCpuDevice } from "@webart/gpu";
import { coopConfig, measurePeak } from "@webart/shaders";
import { DEFAULT_TRAIN_CONFIG } from "./art/train-config.ts";
import type { Engine } from "./engine.ts";
import { freeSample } from "./generate/scheduler.ts";
import { measureGrpoStep } from "./memory.ts";
import { planTraining } from "./plan.ts";
import { startupTuningText, type StartupTuning } from "./tune-cache.ts";

/** The smallest copy the bandwidth test makes (each of its two buffers; quick: 8 MiB): larger than a GPU's last-level
 *  cache (an H100's is 50 MB), or it would time the cache. */
const MIN_COPY = 64 * 2 ** 20;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;

/** Decode steps a run of the check (the engine's default decodeAhead: free text decodes in runs of 8). */
const RUN = 8;

export interface SpeedReport {
  /** The WebGPU adapter, as the engine names it, and whether it is a CPU implementation. */
  device: string;
  cpuDevice: boolean;
  /** Whether the model's products with its weights run on tensor cores (f16 subgroup matrices), and why not. */
  tensorCores: { on: boolean; why?: string };
  /** Measured FMA peak (GFLOP/s) and copy bandwidth (GB/s) of this device. */
  peak: { fmaGflops: number; copyGbps: number };
  /** `q4`: its matrices in 4 bits (EngineOptions.quantize), as `weightBytes` counts them. */
  model: { name: string; layers: number; weightBytes: number; q4: boolean; adapter: boolean };
  /** One prompt of `tokens` tokens, the median of its runs. */
  prefill: { tokens: number; tokensPerSec: number };
  /**
   * Decode in runs of 8 steps with no readback between them, `batch` sequences at once. `ofRoofline` (batch 1): the
   * share of what the copy bandwidth allows when each token reads every weight once.
   */
  decode: { batch: number; tokensPerSec: number; ofRoofline?: number }[];
  /**
   * One LoRA GRPO step (gradients and AdamW) on `batch` random sequences of `length` tokens, as the planner has it run
   * within the budget (micro-batch, recompute), after one untimed step: its time, tokens/s (every token of the batch)
   * and the device's peak live bytes against the plan's. Only with SpeedOptions.train.
   */
  train?: {
    batch: number;
    length: number;
    seconds: number;
    tokensPerSec: number;
    microBatchTokens: number;
    recompute: boolean;
    peakBytes: number;
    plannedBytes: number;
  };
  /** What the engine's load did about start-up tuning: choices timed, read back from its cache, and how long. */
  startupTuning: StartupTuning;
  /** Start-up tuning's choices on this device (problem key: winner), as the engine runs them. */
  kernels: { key: string; winner: string }[];
  /** What the device layer noted: variants not used here, and why. */
  notes: string[];
}

export interface SpeedOptions {
  /** Short timings and small sizes (tests, a first look on a CPU device). */
  quick?: boolean;
  /** Decode batches to time (default 1 and 8; each at most the engine's KV slots). */
  batches?: number[];
  /** Prompt tokens of the prefill (default 256; 64 quick), at most the engine's prefill chunk and context. */
  prefillTokens?: number;
  /** The model's name in the report (default: the engine's, as clients name it). */
  name?: string;
  /**
   * Time a GRPO step too, on the engine's adapter (attachLora first). Its optimizer step has a learning rate of 0, so
   * the adapter's weights stay, but AdamW's moments and step count move: for an adapter of the caller's own (the
   * CLI's), never a run's.
   */
  train?: { batch: number; length: number };
}

/** A free-text sample of row `row` from sequence stream `b`. */
const spec = (row: number, b: number, step: number) => freeSample(row, b, step, 1000 + b);

/**
 * Measures `engine` on its device: FMA peak and copy bandwidth, then a prefill and decode runs at each batch. Runs
 * between requests (Scheduler.withSlots: no step of theirs runs meanwhile; cached prompt prefixes are dropped) on KV
 * slots no request holds, so its inference allocates nothing beyond the probe's buffers (within the budget); a GRPO
 * step (opts.train) runs after, as the planner has it. The model's adapter, if one is on, is part of what is timed,
 * as rollouts run it.
 */
export async function measureSpeed(engine: Engine, opts: SpeedOptions = {}): Promise<SpeedReport> {
  const { gpu, model, runner } = engine;
  const quick = opts.quick ?? false;
  const c = model.config;
  const V = c.vocabSize;
  const batches = [...new Set((opts.batches ?? [1, 8]).map((b) => Math.min(b, runner.slots)))].sort((a, b) => a - b);
  if (!batches.length || batches[0] < 1) throw new Error(`measureSpeed: batches ${JSON.stringify(opts.batches)}`);
  const runs = quick ? 1 : 4;
  const prompt = 8; // each decoding sequence's own short prompt
  const decodeLen = prompt + RUN * (runs + 1); // a warm-up run, then the timed ones
  // One prompt in one step: at most the engine's prefill chunk, the largest step its plan holds.
  const prefillTokens = Math.min(
    opts.prefillTokens ?? (quick ? 64 : 256),
    engine.planSetup.prefillChunk,
    runner.maxContext - 1,
  );
  if (decodeLen > runner.maxContext || prefillTokens < 1) {
    throw new Error(`measureSpeed: the engine's context (${runner.maxContext} tokens) is too short for the check`);
  }
  const ids = (n: number, salt: number) => Uint32Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104729) % V);
  const measured = await engine.scheduler
    .withSlots(batches[batches.length - 1], async (slots) => {
      // Here too no request's step runs meanwhile. The copy's two buffers stay within what the memory budget leaves.
      const room = engine.memoryBudget - Math.max(engine.plan.total, gpu.pool.stats.allocatedBytes);
      const copyBytes = Math.floor(Math.min(room / 2, 2 ** 30) / 2 ** 20) * 2 ** 20;
      const least = quick ? 8 * 2 ** 20 : MIN_COPY;
      if (copyBytes < least) {
        throw new Error(
          `measureSpeed: the memory budget (${mib(engine.memoryBudget)}) leaves ${mib(Math.max(0, room))} beside the ` +
            `engine's plan and what the device holds; the bandwidth test needs 2 x ${mib(least)}: raise the budget ` +
            `(--memory-budget, the app's GPU memory budget) or close other runs`,
        );
      }
      const peak = await measurePeak(gpu, { quick, maxCopyBytes: copyBytes });
      // Prefill: one sequence, a warm-up (its pipelines), then timed prompts.
      const prefillOnce = async () => {
        const t0 = performance.now();
        await runner.step(
          {
            ids: ids(prefillTokens, 1),
            slots: new Uint32Array(prefillTokens).fill(slots[0]),
            pos: iota(prefillTokens),
          },
          [spec(prefillTokens - 1, 0, 0)],
        );
        return performance.now() - t0;
      };
      await prefillOnce();
      const times: number[] = [];
      for (let r = 0; r < (quick ? 1 : 3); r++) times.push(await prefillOnce());
      const prefillMs = times.sort((a, b) => a - b)[times.length >> 1];
      const decode: { batch: number; tokensPerSec: number }[] = [];
      for (const B of batches) {
        const own = slots.slice(0, B);
        // Each sequence's prompt, in one step; then runs of RUN steps feeding back what they sample.
        const first = await runner.step(
          {
            ids: ids(B * prompt, 2),
            slots: Uint32Array.from({ length: B * prompt }, (_, i) => own[Math.floor(i / prompt)]),
            pos: Uint32Array.from({ length: B * prompt }, (_, i) => i % prompt),
          },
          own.map((_, b) => spec(b * prompt + prompt - 1, b, 0)),
        );
        let last = first.ids;
        let at = prompt;
        const run = async () => {
          const res = await runner.decode(
            { ids: last, slots: Uint32Array.from(own), pos: new Uint32Array(B).fill(at) },
            own.map((_, b) => spec(b, b, at - prompt + 1)),
            RUN,
          );
          last = res[RUN - 1].ids;
          at += RUN;
        };
        await run(); // warm-up: the decode kernels' pipelines, the captured step
        const t0 = performance.now();
        for (let r = 0; r < runs; r++) await run();
        decode.push({ batch: B, tokensPerSec: (B * RUN * runs) / ((performance.now() - t0) / 1000) });
      }
      return { peak, prefillMs, decode };
    })
    .finally(() => runner.idle()); // (the captured step's buffers: no request runs now)
  const { peak } = measured;
  let train: SpeedReport["train"];
  if (opts.train) train = await timeTraining(engine, opts.train.batch, Math.min(opts.train.length, runner.maxContext));
  const roofline = (peak.copyGbps * 1e9) / engine.plan.weights;
  const cfg = coopConfig(gpu);
  return {
    device:
      `${gpu.kind.vendor} ${gpu.kind.architecture}`.trim() + (gpu.kind.description ? ` (${gpu.kind.description})` : ""),
    cpuDevice: isCpuDevice(gpu),
    tensorCores: model.tensorCores
      ? { on: true }
      : {
          on: false,
          why: cfg
            ? "turned off (EngineOptions.tensorCores)"
            : "this device offers no f16 subgroup matrices (chromium-experimental-subgroup-matrix with shader-f16)",
        },
    peak: { fmaGflops: peak.fmaGflops, copyGbps: peak.copyGbps },
    model: {
      name: opts.name ?? engine.name,
      layers: c.numLayers,
      weightBytes: engine.plan.weights,
      q4: model.quantized,
      adapter: !!model.lora,
    },
    prefill: { tokens: prefillTokens, tokensPerSec: prefillTokens / (measured.prefillMs / 1000) },
    decode: measured.decode.map((d) => (d.batch === 1 ? { ...d, ofRoofline: d.tokensPerSec / roofline } : d)),
    ...(train ? { train } : {}),
    startupTuning: { ...engine.startupTuning },
    kernels: [...gpu.tuning].map(([key, v]) => ({ key, winner: v.winner })).sort((a, b) => (a.key < b.key ? -1 : 1)),
    notes: [...gpu.notes],
  };
}

/** One GRPO step as the trainer would run it here: the planner chooses its micro-batch and recompute within the
 *  budget (as a run's step does), then an untimed step (pipelines, the optimizer's state) and the timed one. */
async function timeTraining(engine: Engine, batch: number, length: number): Promise<NonNullable<SpeedReport["train"]>> {
  const lora = engine.model.lora;
  if (!lora) throw new Error("measureSpeed: train times the engine's adapter; attach one first (Engine.attachLora)");
  lora.ensureOptimizer();
  const gpu = engine.gpu;
  const held = gpu.pool.stats.liveBytes;
  const choice = planTraining(
    engine.config,
    engine.planSetup,
    { maxStorageBufferBindingSize: gpu.maxStorageBinding, maxBufferSize: gpu.maxBufferSize },
    engine.memoryBudget,
    {
      microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens,
      longest: length,
      held,
      stepTokens: batch * length,
      sequences: batch,
    },
  );
  const o = {
    batch,
    length,
    microBatchTokens: choice.microBatchTokens,
    recompute: choice.recompute,
    vocabChunk: choice.vocabChunk,
  };
  await measureGrpoStep(engine, o);
  const m = await measureGrpoStep(engine, o);
  return {
    batch,
    length,
    seconds: m.ms / 1000,
    tokensPerSec: (batch * length) / (m.ms / 1000),
    microBatchTokens: choice.microBatchTokens,
    recompute: choice.recompute,
    peakBytes: m.peak,
    plannedBytes: held + choice.plan.training,
  };
}

function iota(n: number): Uint32Array {
  return Uint32Array.from({ length: n }, (_, i) => i);
}

/** The report's figures as labelled rows, worded once for the CLI's lines and the web app's table. `key`: "device",
 *  "peak", "tensorCores", "model", "prefill", "decode-b<B>". */
export function speedRows(r: SpeedReport): { key: string; label: string; text: string }[] {
  const size = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(1)} MiB`);
  const f = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toPrecision(3));
  const b1 = r.decode.find((d) => d.batch === 1);
  return [
    { key: "device", label: "device", text: `${r.device}${r.cpuDevice ? ", a CPU implementation" : ""}` },
    {
      key: "peak",
      label: "peak",
      text: `${f(r.peak.fmaGflops)} GFLOP/s FMA, ${f(r.peak.copyGbps)} GB/s copy (measured now)`,
    },
    { key: "tensorCores", label: "tensor cores", text: r.tensorCores.on ? "on" : `off: ${r.tensorCores.why}` },
    {
      key: "model",
      label: "model",
      text:
        `${r.model.name}, ${r.model.layers} layers, ${size(r.model.weightBytes)} of weights` +
        (r.model.q4 ? " (q4)" : "") +
        (r.model.adapter ? ", with a LoRA adapter" : ""),
    },
    {
      key: "prefill",
      label: "prefill",
      text: `${f(r.prefill.tokensPerSec)} tokens/s (one prompt of ${r.prefill.tokens} tokens)`,
    },
    ...r.decode.map((d) => ({
      key: `decode-b${d.batch}`,
      label: `decode b${d.batch}`,
      text:
        `${f(d.tokensPerSec)} tokens/s in runs of ${RUN} steps` +
        (d.ofRoofline !== undefined
          ? ` (${(100 * d.ofRoofline).toFixed(1)}% of the copy roofline: every weight read once a token)`
          : b1
            ? ` (${(d.tokensPerSec / b1.tokensPerSec).toFixed(1)}x batch 1)`
            : ""),
    })),
    ...(r.train
      ? [
          {
            key: "train",
            label: "GRPO step",
            text:
              `${r.train.seconds < 10 ? r.train.seconds.toFixed(2) : r.train.seconds.toFixed(1)} s for ` +
              `${r.train.batch} x ${r.train.length} tokens, ${f(r.train.tokensPerSec)} tokens/s ` +
              `(micro-batches of ${r.train.microBatchTokens} tokens, recompute ${r.train.recompute ? "on" : "off"}); ` +
              `peak ${size(r.train.peakBytes)}, planned ${size(r.train.plannedBytes)}`,
          },
        ]
      : []),
    { key: "tuning", label: "tuning", text: startupTuningText(r.startupTuning) },
  ];
}

/** The report as lines of text (the CLI prints them): its rows but those keyed in `omit` (the CLI has printed the
 *  device already), then the kernel choices and the device's notes. */
export function speedLines(r: SpeedReport, omit: string[] = []): string[] {
  const lines = speedRows(r)
    .filter((row) => !omit.includes(row.key))
    .map((row) => `${row.label}:`.padEnd(14) + row.text);
  lines.push(`kernels:`.padEnd(14) + (r.kernels.length ? "" : "defaults (no start-up tuning ran)"));
  for (const k of r.kernels) lines.push(`  ${k.key}: ${k.winner}`);
  for (const n of r.notes) lines.push(`note: ${n}`);
  return lines;
}
