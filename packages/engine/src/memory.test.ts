// The memory planner's promise, measured on Dawn: the peak live bytes of the largest inference step and of
// a GRPO step (activations kept, and recomputed) match the plan; a plan over the budget is refused before
// anything is allocated; a sequence longer than the micro-batch still trains.
import { readFileSync, mkdtempSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { tmpdir } from "node:os";
import { createDevice, getDevice, Rng, type Gpu } from "@webart/gpu";
import { loraLayout } from "@webart/shaders";
import { LocalBackend } from "./art/local-backend.ts";
import { TrainableModel } from "./art/model.ts";
import { Trajectory, TrajectoryGroup, type SampledChoice } from "./art/trajectories.ts";
import { Engine } from "./engine.ts";
import { loraGradients, measureDecodeRun, measureGrpoStep, measureInference } from "./memory.ts";
import { LORA_TARGETS, planMemory, type PlanSetup } from "./plan.ts";
import { DECODE_ROWS } from "./model/decode-rows.ts";
import { randomTensors, tinyConfigJson } from "./weights/testing.ts";
import { writeSafetensors } from "./weights/index.ts";

const TINY = join(import.meta.dirname, "../../../models/webart-tiny");
let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

/** A model folder in memory: a config of the family at small widths, random weights, the embedded tokenizer. */
function modelFiles(family: "qwen2" | "qwen3" | "gemma3", widths: Record<string, unknown> = {}): Map<string, Blob> {
  const gemma =
    family === "gemma3"
      ? { sliding_window: 8, layer_types: ["sliding_attention", "full_attention", "sliding_attention"] }
      : {};
  const json = tinyConfigJson(family, {
    hidden_size: 64,
    intermediate_size: 160,
    num_hidden_layers: 3,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 16,
    vocab_size: 512,
    max_position_embeddings: 512,
    tie_word_embeddings: family !== "qwen2",
    ...gemma,
    // Qwen2: k and v of 64 floats, so the q, k, v biases sit back to back (each starts on 256 bytes) and training
    // runs q|k|v as one matmul with its bias.
    ...(family === "qwen2" ? { hidden_size: 128, head_dim: 32 } : {}),
    ...widths,
  });
  const files = new Map<string, Blob>();
  files.set("config.json", new Blob([JSON.stringify(json)]));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) files.set(f, new Blob([readFileSync(join(TINY, f))]));
  files.set("model.safetensors", new Blob([writeSafetensors(randomTensors(json, "BF16"), { format: "pt" })]));
  return files;
}

/** The plan setup of an engine loaded with these options and an adapter of `rank` on every target, with the device's
 *  choices the engine made (RoPE in the q|k|v matvec where the device binds enough buffers, an f32 model's inference
 *  on weights with the adapter merged in, split-KV's partials as this device's decode attention splits). */
function setupOf(
  engine: Engine,
  o: { quantize?: "q4"; kvSlots: number; maxContext: number; prefillChunk: number; vocabChunk: number; rank: number },
): PlanSetup {
  return {
    weightBytes: engine.config.torchDtype === "float32" ? 4 : 2,
    quantize: o.quantize,
    kvSlots: o.kvSlots,
    kvContext: o.maxContext,
    prefillChunk: o.prefillChunk,
    vocabChunk: o.vocabChunk,
    lora: { rank: o.rank, targets: LORA_TARGETS },
    ropeInMatvec: engine.planSetup.ropeInMatvec,
    mergeLora: engine.planSetup.mergeLora,
    splitKvTarget: engine.planSetup.splitKvTarget,
  };
}

describe.each([
  ["webart-tiny (Llama, f32)", () => TINY, undefined],
  ["Qwen2 (q/k/v bias, bf16)", () => modelFiles("qwen2"), undefined],
  ["Qwen3 (q/k norm, bf16)", () => modelFiles("qwen3"), undefined],
  ["Gemma 3 (four norms a layer, sliding window, bf16)", () => modelFiles("gemma3"), undefined],
  // A GPU's default for 16-bit weights: decode on an f32 copy with the adapter merged in.
  ["Qwen3 (bf16), the adapter merged into an f32 copy", () => modelFiles("qwen3"), true],
  // q4 weights (projections, embedding, LM head): nibbles and scales, and the f16 copy of the product that runs.
  ["webart-tiny, q4 weights", () => TINY, undefined, "q4"],
  ["Qwen3, q4 weights", () => modelFiles("qwen3"), undefined, "q4"],
] as const)("%s: measured peak = planned peak", (_, source, mergeLora, quantize?: "q4") => {
  const kvSlots = 4;
  const maxContext = 128;
  const prefillChunk = 48;
  let engine: Engine;
  let setup: PlanSetup;
  beforeAll(async () => {
    engine = await Engine.load(source(), { gpu, kvSlots, maxContext, prefillChunk, tune: false, mergeLora, quantize });
    expect(engine.model.quantized).toBe(!!quantize);
    engine.attachLora({ rank: 4, targets: [...LORA_TARGETS] });
    if (mergeLora) expect(engine.model.mergedBytes).toBeGreaterThan(0);
    setup = setupOf(engine, { quantize, kvSlots, maxContext, prefillChunk, vocabChunk: 256, rank: 4 });
    return () => engine.close();
  });

  it("inference: the largest step the scheduler makes peaks at or below the plan, within 10%", async () => {
    const held = gpu.pool.stats.liveBytes;
    const plan = planMemory(engine.config, setup);
    const m = await measureInference(engine, prefillChunk);
    // The plan's peak is the larger of this step and a decode run (here, at these widths, often the run).
    expect(m.peak).toBeLessThanOrEqual(plan.peakInference);
    expect(m.peak / (plan.peakInference - plan.inference + plan.inferenceStep)).toBeGreaterThan(0.9);
    // No buffer past what the plan checks against the device's storage binding.
    expect(m.largestBuffer).toBeLessThanOrEqual(plan.largestBinding);
    // The working set alone, above what the engine holds: at most the plan's step, and within 10% of it.
    expect((m.peak - held) / plan.inferenceStep).toBeGreaterThan(0.9);
    expect((m.peak - held) / plan.inferenceStep).toBeLessThanOrEqual(1);
  });

  it("a decode run (8 steps replaying the captured one) peaks at or below the plan, within 10%", async () => {
    const plan = planMemory(engine.config, setup);
    await measureDecodeRun(engine, 8); // its pipelines
    const held = gpu.pool.stats.liveBytes;
    const m = await measureDecodeRun(engine, 8);
    expect(m.replays).toBe(7);
    // The tape: one buffer a temporary (q4: one f16 copy of a layer's weights, one of the head's rows) and its
    // uniforms; beside it, a step's own buffers and one uniform chunk.
    expect(m.tapeBytes).toBeGreaterThan(64 * 1024);
    expect(m.largestBuffer).toBeLessThanOrEqual(plan.largestBinding);
    expect(m.peak).toBeLessThanOrEqual(plan.peakInference);
    expect((m.peak - held) / plan.decodeRun).toBeGreaterThan(0.9);
    expect((m.peak - held) / plan.decodeRun).toBeLessThanOrEqual(1);
  });

  it("inference where tuning runs steps of more than 8 rows one op at a time (decodeRows 8)", async () => {
    engine.model.decodeRows = 8;
    try {
      const held = gpu.pool.stats.liveBytes;
      const plan = planMemory(engine.config, { ...setup, decodeRows: 8 });
      expect(plan.inference).toBeGreaterThan(planMemory(engine.config, setup).inference);
      const m = await measureInference(engine, prefillChunk);
      expect(m.peak / plan.peakInference).toBeLessThanOrEqual(1);
      expect((m.peak - held) / plan.inferenceStep).toBeGreaterThan(0.9);
      expect((m.peak - held) / plan.inferenceStep).toBeLessThanOrEqual(1);
    } finally {
      engine.model.decodeRows = DECODE_ROWS;
    }
  });

  it.each([false, true])(
    "a GRPO step of 4 x 40 tokens in micro-batches of 2 (recompute %s) peaks at or below the plan, within 10%",
    async (recompute) => {
      const o = { batch: 4, length: 40, microBatchTokens: 80, recompute, vocabChunk: 256 };
      await measureGrpoStep(engine, o); // allocates the optimizer state
      const held = gpu.pool.stats.liveBytes;
      const plan = planMemory(engine.config, { ...setup, train: { microBatchTokens: 80, recompute } });
      const m = await measureGrpoStep(engine, o);
      expect(m.microBatches).toBe(2);
      expect(m.largestBuffer).toBeLessThanOrEqual(plan.largestBinding);
      expect(m.peak / plan.peakTraining).toBeGreaterThan(0.9);
      expect(m.peak / plan.peakTraining).toBeLessThanOrEqual(1);
      expect((m.peak - held) / plan.training).toBeGreaterThan(0.9);
      expect((m.peak - held) / plan.training).toBeLessThanOrEqual(1);
      expect(gpu.pool.stats.liveBytes).toBe(held);
    },
  );

  it.each([false, true])(
    "a GRPO step of one whole micro-batch (4 x 128 tokens, recompute %s) peaks at or below the plan",
    async (recompute) => {
      const o = { batch: 4, length: 128, microBatchTokens: 512, recompute, vocabChunk: 256 };
      await measureGrpoStep(engine, o); // the optimizer state, the pipelines
      const plan = planMemory(engine.config, {
        ...setup,
        train: { microBatchTokens: 512, recompute, stepTokens: 512 },
      });
      const m = await measureGrpoStep(engine, o);
      expect(m.microBatches).toBe(1);
      // The step's widest buffer (gate|up, 512 x 2F floats: more than any weight here) is the plan's largest binding.
      expect(m.largestBuffer).toBe(plan.largestBinding);
      expect(m.peak).toBeLessThanOrEqual(plan.peakTraining);
      expect(m.peak / plan.peakTraining).toBeGreaterThan(0.9);
    },
  );

  it("a step's per-token rows (an entropy each, and a logprob each when SFT reads them) are planned for the whole step", async () => {
    const step = async (batch: number, newLogprobs: boolean) => {
      const o = { batch, length: 40, microBatchTokens: 80, recompute: true, vocabChunk: 256, newLogprobs };
      const train = { microBatchTokens: 80, recompute: true, stepTokens: batch * 40, logprobs: newLogprobs };
      const plan = planMemory(engine.config, { ...setup, train });
      const m = await measureGrpoStep(engine, o);
      expect(m.peak).toBeLessThanOrEqual(plan.peakTraining);
      return { measured: m.peak, planned: plan.peakTraining, microBatches: m.microBatches };
    };
    const few = await step(4, false);
    const many = await step(16, false);
    const sft = await step(16, true);
    expect([few.microBatches, many.microBatches, sft.microBatches]).toEqual([2, 8, 8]);
    // The same micro-batches with more of them, then with logprobs kept: the peak grows by the rows alone, as planned
    // (480 more entropies, then 640 logprobs, 4 bytes each).
    expect(many.measured - few.measured).toBe((16 - 4) * 40 * 4);
    expect(many.planned - few.planned).toBe(many.measured - few.measured);
    expect(sft.measured - many.measured).toBe(16 * 40 * 4);
    expect(sft.planned - many.planned).toBe(sft.measured - many.measured);
  });

  it("with GPUs' LoRA layout (gradient sums split by 128 tokens), the plan counts the partial sums", async () => {
    const tuning = engine.model.tuning;
    const o = { batch: 2, length: 200, microBatchTokens: 400, recompute: true, vocabChunk: 256 };
    const peaks: Record<string, { measured: number; planned: number }> = {};
    try {
      for (const layout of ["cpu", "gpu"] as const) {
        tuning.lora = { layout };
        const chunk = layout === "gpu" ? 128 : undefined;
        const plan = planMemory(engine.config, {
          ...setup,
          loraGradChunk: chunk,
          train: { microBatchTokens: 400, recompute: true },
        });
        const m = await measureGrpoStep(engine, o);
        peaks[layout] = { measured: m.peak, planned: plan.peakTraining };
        expect(m.peak / plan.peakTraining).toBeGreaterThan(0.9);
        expect(m.peak / plan.peakTraining).toBeLessThanOrEqual(1);
      }
    } finally {
      delete tuning.lora;
    }
    // 4 splits of the widest LoRA gradient (I = max(C, F) rows x rank 4): more memory where they meet the step's
    // peak, and planned at least as much.
    const measured = peaks.gpu.measured - peaks.cpu.measured;
    const planned = peaks.gpu.planned - peaks.cpu.planned;
    expect(measured).toBeGreaterThanOrEqual(0);
    expect(measured).toBeLessThanOrEqual(planned);
  });

  it("loraGradients: one batch's gradients, the same each time; GPUs' LoRA layout (split sums) gives the CPU one's", async () => {
    const lora = engine.model.lora!;
    lora.write(new Rng(4).f32(lora.size, -0.05, 0.05)); // B != 0, so dA is not zero
    const o = { batch: 2, length: 200, microBatchTokens: 400, recompute: true, vocabChunk: 256 };
    const tuning = engine.model.tuning;
    const grads: Record<string, Float32Array> = {};
    try {
      for (const layout of ["cpu", "gpu"] as const) {
        tuning.lora = { layout };
        grads[layout] = (await loraGradients(engine, o)).grads;
      }
      expect((await loraGradients(engine, o)).grads).toEqual(grads.gpu); // deterministic: no atomics
    } finally {
      delete tuning.lora;
    }
    const { cpu, gpu: g } = grads;
    expect(cpu.length).toBe(lora.size);
    const norm = Math.sqrt(cpu.reduce((a, v) => a + v * v, 0));
    expect(norm).toBeGreaterThan(0);
    let diff = 0;
    for (let i = 0; i < cpu.length; i++) diff += (g[i] - cpu[i]) ** 2;
    expect(Math.sqrt(diff) / norm).toBeLessThan(1e-4); // the same sums in another order
  });

  it("q|k|v and gate|up as one matmul each (forward and backward): the same gradients in fewer dispatches", async () => {
    const model = engine.model;
    const lora = model.lora!;
    lora.write(new Rng(6).f32(lora.size, -0.05, 0.05));
    const o = { batch: 2, length: 40, microBatchTokens: 80, recompute: true, vocabChunk: 256 };
    const L = model.weights.layers[0];
    expect(L.up.offset).toBe(L.gate.offset + L.gate.rows * L.gate.cols); // back to back: fusable
    expect(L.k.offset).toBe(L.q.offset + L.q.rows * L.q.cols);
    const run = async (gateUp: boolean, qkv: boolean) => {
      [model.fuseGateUp, model.fuseQkv] = [gateUp, qkv];
      try {
        return await loraGradients(engine, o);
      } finally {
        [model.fuseGateUp, model.fuseQkv] = [true, true];
      }
    };
    const apart = await run(false, false);
    const gateUp = await run(true, false);
    const both = await run(true, true);
    const layers = model.config.numLayers;
    expect(loraLayout(gpu, model.tuning.lora)).toBe("cpu"); // SwiftShader: no split sums, 4 LoRA dispatches a target
    // gate|up: a layer's forward (twice: recompute) and backward each lose one matmul. Their LoRA terms run as a group
    // either way; as one product, t·Bᵀ is one dispatch instead of 2 (twice), and backward's dt and dB one each.
    // With q4 weights each matmul also reads an f16 copy made by its own dispatch (Model.dense): one fewer each.
    const dq = model.quantized ? 1 : 0;
    expect(apart.dispatches - gateUp.dispatches).toBe((3 * (1 + dq) + 2 * 1 + 2) * layers);
    // (Biases fuse only back to back: each starts on 256 bytes, so a k bias of 32 floats leaves a gap before v's.)
    const biases =
      !L.qBias ||
      (L.kBias!.offset === L.qBias.offset + L.qBias.length && L.vBias!.offset === L.kBias!.offset + L.kBias!.length);
    // q|k|v: two matmuls and a RoPE in each forward, two matmuls and a RoPE (for the pack) in backward; LoRA: t·Bᵀ
    // one dispatch instead of 3 (twice), backward's dt and dB one each instead of 3. Per-head q/k norms run in ropeQkv
    // too (two fewer in each forward), and their two backwards in one.
    const norms = model.config.qkNorm ? 2 * 2 + 1 : 0;
    expect(gateUp.dispatches - both.dispatches).toBe(biases ? (9 + 6 * dq + 2 * 2 + 4 + norms) * layers : 0);
    for (const got of [gateUp, both]) {
      let [diff, norm] = [0, 0];
      for (let i = 0; i < got.grads.length; i++) {
        diff += (got.grads[i] - apart.grads[i]) ** 2;
        norm += apart.grads[i] ** 2;
      }
      expect(norm).toBeGreaterThan(0);
      expect(Math.sqrt(diff / norm)).toBeLessThan(1e-5);
    }
  });

  it("training's forward submitted part-way (a GPU's default: Model.submitLayers) gives the same gradients", async () => {
    const model = engine.model;
    model.lora!.write(new Rng(7).f32(model.lora!.size, -0.05, 0.05));
    // Activations kept: the forward releases nothing, so only submitLayers submits it part-way.
    const o = { batch: 2, length: 40, microBatchTokens: 80, recompute: false, vocabChunk: 256 };
    const queue = gpu.device.queue;
    const submit = queue.submit;
    const before = model.submitLayers;
    const run = async (k: number) => {
      let submits = 0;
      queue.submit = (buffers) => (submits++, submit.call(queue, buffers));
      model.submitLayers = k;
      try {
        return { ...(await loraGradients(engine, o)), submits };
      } finally {
        queue.submit = submit;
        model.submitLayers = before;
      }
    };
    const once = await run(0);
    const parts = await run(1);
    // After each layer but the last, where a release has not just submitted it (flushIfPending, in both runs).
    expect(parts.submits).toBeGreaterThan(once.submits);
    expect(parts.submits - once.submits).toBeLessThanOrEqual(model.config.numLayers - 1);
    expect(parts.grads).toEqual(once.grads);
  });

  it("recompute keeps less: the plans and the measurements agree on how much less", async () => {
    const o = { batch: 2, length: 64, microBatchTokens: 128, vocabChunk: 256 };
    const keep = await measureGrpoStep(engine, { ...o, recompute: false });
    const re = await measureGrpoStep(engine, { ...o, recompute: true });
    const pk = planMemory(engine.config, { ...setup, train: { microBatchTokens: 128, recompute: false } });
    const pr = planMemory(engine.config, { ...setup, train: { microBatchTokens: 128, recompute: true } });
    expect(re.peak).toBeLessThan(keep.peak);
    expect((keep.peak - re.peak) / (pk.peakTraining - pr.peakTraining)).toBeGreaterThan(0.9);
    expect((keep.peak - re.peak) / (pk.peakTraining - pr.peakTraining)).toBeLessThan(1.1);
  });
});

// Real widths (1 layer, random bf16 weights): there the MLP's buffers are a step's peak (at the test models' widths
// above, often the head's are), so every buffer of that phase must be counted. gate|up's LoRA t is 2 x rank wide
// (planned at 1 x, Qwen2.5-0.5B's step measured 1.0005 x its plan); Gemma's frozen norms make no weight-gradient
// partials (counted, its GRPO step measured 0.959 of its plan). A 6000-token vocabulary: at 4096, 4 rows' logits are
// the size of Qwen3's q|k|v, and a capture reuses one buffer for both where the decode-run plan counts two.
const QWEN05 = {
  hidden_size: 896,
  intermediate_size: 4864,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  head_dim: 64,
};
describe.each([
  ["Qwen2.5-0.5B", "qwen2", QWEN05, undefined],
  [
    "Qwen3-0.6B",
    "qwen3",
    { hidden_size: 1024, intermediate_size: 3072, num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128 },
    undefined,
  ],
  [
    "Gemma-3-1B",
    "gemma3",
    {
      hidden_size: 1152,
      intermediate_size: 6912,
      num_attention_heads: 4,
      num_key_value_heads: 1,
      head_dim: 256,
      layer_types: ["full_attention"],
    },
    undefined,
  ],
  ["Qwen2.5-0.5B, q4 weights", "qwen2", QWEN05, "q4"],
] as const)("at %s's widths (1 layer, a 6000-token vocabulary)", (_, family, widths, quantize) => {
  const kvSlots = 4;
  const maxContext = 256;
  const prefillChunk = 128;
  let engine: Engine;
  let setup: PlanSetup;
  beforeAll(async () => {
    const files = modelFiles(family, { ...widths, num_hidden_layers: 1, vocab_size: 6000 });
    engine = await Engine.load(files, { gpu, kvSlots, maxContext, prefillChunk, tune: false, quantize });
    engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
    setup = setupOf(engine, { quantize, kvSlots, maxContext, prefillChunk, vocabChunk: 1024, rank: 8 });
    return () => engine.close();
  });

  it("the largest inference step and a decode run: each working set at or below its plan, within 1%", async () => {
    const plan = planMemory(engine.config, setup);
    await measureInference(engine, prefillChunk); // its pipelines
    let held = gpu.pool.stats.liveBytes;
    const step = await measureInference(engine, prefillChunk);
    expect((step.peak - held) / plan.inferenceStep).toBeLessThanOrEqual(1);
    expect((step.peak - held) / plan.inferenceStep).toBeGreaterThan(0.99);
    await measureDecodeRun(engine, 8);
    held = gpu.pool.stats.liveBytes;
    const run = await measureDecodeRun(engine, 8);
    expect((run.peak - held) / plan.decodeRun).toBeLessThanOrEqual(1);
    expect((run.peak - held) / plan.decodeRun).toBeGreaterThan(0.9);
  });

  it.each([false, true])(
    "a GRPO step of 2 x 64 tokens (recompute %s) at or below its plan, within 1%",
    async (recompute) => {
      const o = { batch: 2, length: 64, microBatchTokens: 128, recompute, vocabChunk: 1024 };
      await measureGrpoStep(engine, o); // the optimizer state, the pipelines
      const held = gpu.pool.stats.liveBytes;
      const plan = planMemory(engine.config, { ...setup, train: { microBatchTokens: 128, recompute } });
      const m = await measureGrpoStep(engine, o);
      expect((m.peak - held) / plan.training).toBeLessThanOrEqual(1);
      expect((m.peak - held) / plan.training).toBeGreaterThan(0.99);
    },
  );
});

describe("the budget", () => {
  it("Engine.load refuses a plan over the budget before allocating, naming its parts and what to change", async () => {
    const live = gpu.pool.stats.liveBytes;
    const created = gpu.pool.stats.buffersCreated;
    const err = await Engine.load(TINY, {
      gpu,
      kvSlots: 16,
      maxContext: 1024,
      memoryBudget: 8 * 2 ** 20,
      tune: false,
    }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).name).toBe("PlanError");
    expect((err as Error).message).toMatch(/but the memory budget is 8\.0 MiB/);
    expect((err as Error).message).toMatch(/Largest parts: KV cache 16\.0 MiB, weights/);
    expect((err as Error).message).toMatch(/fewer KV slots/);
    expect(gpu.pool.stats.liveBytes).toBe(live);
    expect(gpu.pool.stats.buffersCreated).toBe(created);
  });

  it("a training plan that needs recompute to fit gets it; one that cannot fit at all is refused", async () => {
    const opts = { gpu, kvSlots: 4, maxContext: 1024, tune: false };
    const train = { lora: { rank: 8, targets: LORA_TARGETS }, microBatchTokens: 4096 };
    const roomy = await Engine.load(TINY, { ...opts, train });
    const p = roomy.plan;
    await roomy.close();
    expect(p.lines[5]).toMatch(/recompute off/);
    // Just under keeping the activations of one context-long sequence: the planner turns recompute on.
    const c = roomy.config;
    const base = {
      weightBytes: 4 as const,
      kvSlots: 4,
      kvContext: 1024,
      prefillChunk: 256,
      vocabChunk: 406,
      lora: train.lora,
    };
    const budget = planMemory(c, { ...base, train: { microBatchTokens: 1024, recompute: false } }).total - 1;
    const tight = await Engine.load(TINY, { ...opts, train, memoryBudget: budget });
    expect(tight.plan.total).toBeLessThanOrEqual(budget);
    expect(tight.plan.lines[5]).toMatch(/recompute on/);
    await tight.close();
    const err = await Engine.load(TINY, { ...opts, train, memoryBudget: p.weights + p.kvCache + 1024 }).catch(
      (e: Error) => e,
    );
    expect((err as Error).message).toMatch(
      /^training does not fit even with 1024 tokens per micro-batch, recompute on/,
    );
    expect((err as Error).message).toMatch(/the longest sequence has 1024 tokens/);
  });
});

describe("start-up tuning", () => {
  // A device of its own for each load, so its tuning measures every problem instead of reusing another test's results.
  it.each([
    ["webart-tiny (f32)", () => TINY, undefined],
    ["Qwen3 (bf16)", () => modelFiles("qwen3"), undefined],
    // A GPU's problems (asGpu), with q4's: an MLP on the nibbles against its f16 copy (tuneQ4Rows).
    ["Qwen3 (q4, a GPU's paths)", () => modelFiles("qwen3"), "q4"],
  ] as const)(
    "%s: the plan's tuning line holds tuning's buffers, and the load stays within the plan",
    async (_, source, quantize) => {
      const fresh = await createDevice({ asGpu: !!quantize });
      try {
        const start = fresh.pool.stats.allocatedBytes;
        const engine = await Engine.load(source(), { gpu: fresh, kvSlots: 4, maxContext: 128, quantize });
        if (quantize) {
          expect([...fresh.tuning.keys()].some((k) => k.startsWith("decode.q4rows@"))).toBe(true);
          expect(engine.model.q4MatvecRows).toBe(engine.model.tuning.q4Rows);
        }
        const plan = engine.plan;
        await engine.close();
        expect(fresh.tuning.size).toBeGreaterThan(10);
        // Everything the load had on the device at once: tuning's buffers (given back as each problem ends), the
        // pool's free ones, the weights and the rest.
        expect(fresh.pool.stats.peakAllocatedBytes - start).toBeLessThanOrEqual(plan.total);
        // The tuning line holds its largest problem, and is not far above it.
        const measured = fresh.pool.stats.peakByTag.tune;
        expect(plan.lines.some((l) => l.startsWith("tuning "))).toBe(true);
        expect(measured).toBeLessThanOrEqual(plan.tuning);
        expect(plan.tuning).toBeLessThan(1.5 * measured + 2 ** 18);
      } finally {
        fresh.destroy();
      }
    },
  );
});

describe("LocalBackend steps", () => {
  it("a trajectory longer than the micro-batch trains: the planner takes a micro-batch of its length; the step reports plan and peak", async () => {
    const backend = new LocalBackend({
      path: mkdtempSync(join(tmpdir(), "webart-mem-")),
      engine: { gpu, kvSlots: 4, maxContext: 256, tune: false },
    });
    try {
      const model = new TrainableModel({ name: "long", project: "mem", baseModel: TINY });
      await model.register(backend);
      const client = model.openaiClient();
      const messages = [
        {
          role: "user" as const,
          content: "x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o x o",
        },
      ];
      const trajectories: Trajectory[] = [];
      for (let i = 0; i < 2; i++) {
        const r = await client.chat.completions.create({
          model: model.getInferenceName(),
          messages,
          max_tokens: 4,
          temperature: 1,
          seed: i,
        });
        trajectories.push(
          new Trajectory({ messagesAndChoices: [...messages, r.choices[0] as SampledChoice], reward: i }),
        );
      }
      const live = gpu.pool.stats.liveBytes;
      const r = await model.train([new TrajectoryGroup(trajectories)], { learningRate: 1e-4, microBatchTokens: 16 });
      const m = r.metrics;
      expect(r.step).toBe(1);
      expect(m.micro_batch_tokens).toBeGreaterThan(40); // the longest sequence, not 16
      expect(m.recompute).toBe(false);
      expect(m.memory_peak_gib).toBeGreaterThan(0);
      expect(m.memory_peak_gib / m.memory_planned_gib).toBeGreaterThan(0.9);
      expect(m.memory_peak_gib / m.memory_planned_gib).toBeLessThanOrEqual(1);
      // Forcing recompute is honoured, and the step leaves nothing live behind.
      const r2 = await model.train([new TrajectoryGroup(trajectories)], { learningRate: 1e-4, recompute: "on" });
      expect(r2.metrics.recompute).toBe(true);
      expect(gpu.pool.stats.liveBytes).toBe(live);
    } finally {
      await backend.close();
    }
  });
});
