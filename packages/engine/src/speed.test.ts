// The speed check (measureSpeed) on the embedded model: its figures, that it leaves the engine as it found it, and
// that it refuses to take KV slots that requests in flight hold.
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createDevice, Rng } from "@webart/gpu";
import { DEFAULT_TRAIN_CONFIG } from "./art/train-config.ts";
import { Engine } from "./engine.ts";
import { LORA_TARGETS } from "./plan.ts";
import { measureSpeed, speedLines } from "./speed.ts";

const MODEL_DIR = join(import.meta.dirname, "../../../models/webart-tiny");
let engine: Engine;
const messages = [{ role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" }];

beforeAll(async () => {
  engine = await Engine.load(MODEL_DIR, { name: "tiny", kvSlots: 4, maxContext: 256 });
});
afterAll(() => engine.close());

/** A greedy reply of 12 tokens (temperature 0: the same tokens whatever ran before). */
async function reply(): Promise<string> {
  const r = await engine
    .openaiClient()
    .chat.completions.create({ model: "tiny", messages, max_tokens: 12, temperature: 0 });
  return r.choices[0].message.content ?? "";
}

it("measures peak, prefill and decode on the engine's own slots, and leaves the engine serving as before", async () => {
  const before = await reply(); // (its prompt's KV stays cached in a slot: the check drops it)
  const live = engine.gpu.memory.byTag.activations ?? 0;
  const r = await measureSpeed(engine, { quick: true, batches: [1, 8] });
  expect(r.cpuDevice).toBe(true);
  expect(r.peak.fmaGflops).toBeGreaterThan(0);
  expect(r.peak.copyGbps).toBeGreaterThan(0);
  expect(r.prefill.tokens).toBe(64);
  expect(r.prefill.tokensPerSec).toBeGreaterThan(0);
  // Batch 8 asked of 4 slots: batch 4.
  expect(r.decode.map((d) => d.batch)).toEqual([1, 4]);
  for (const d of r.decode) expect(Number.isFinite(d.tokensPerSec) && d.tokensPerSec > 0).toBe(true);
  expect(r.decode[0].ofRoofline).toBeGreaterThan(0);
  expect(r.decode[1].ofRoofline).toBeUndefined();
  expect(r.model).toEqual({ name: "tiny", layers: 4, weightBytes: engine.plan.weights, q4: false, adapter: false });
  expect(r.tensorCores.on).toBe(false);
  expect(r.train).toBeUndefined(); // (not asked for)
  expect(r.kernels.map((k) => k.key)).toEqual([...engine.gpu.tuning.keys()].sort());
  // Nothing of the check stays on the device (the captured decode step went with it), and replies are unchanged.
  expect(engine.gpu.memory.byTag.activations ?? 0).toBe(live);
  expect(await reply()).toBe(before);
  const lines = speedLines(r);
  expect(lines.find((l) => l.startsWith("decode b1:"))).toMatch(/tokens\/s in runs of 8 steps \(\d+\.\d% of the copy/);
  expect(lines.find((l) => l.startsWith("decode b4:"))).toMatch(/x batch 1\)$/);
  // The load's tuning, as it happened (the tests keep no tuning cache).
  expect(r.startupTuning).toEqual(engine.startupTuning);
  expect(lines.find((l) => l.startsWith("tuning:"))).toMatch(
    /^tuning: +(\d+ kernel choices timed in [\d.]+ s \(no tuning cache\)|every choice made by an earlier load)/,
  );
  expect(engine.gpu.errors).toEqual([]);
});

it("is refused while requests in flight hold the slots it needs, and they finish as they would have", async () => {
  // Four streams hold the engine's four slots between their steps: each reply is forced to one long choice, a
  // token at a time, so they are still running when the check asks.
  const choice = "A1 B2 C3 ".repeat(20).trim(); // ~160 tokens
  const client = engine.openaiClient();
  const body = { model: "tiny", messages, max_tokens: 200, temperature: 0, stream: true as const };
  const streams = await Promise.all(
    Array.from({ length: 4 }, () =>
      client.chat.completions.create({ ...body, guided_choice: [choice] } as typeof body),
    ),
  );
  const its = streams.map((s) => s[Symbol.asyncIterator]());
  const texts = await Promise.all(its.map(async (it) => (await it.next()).value?.choices[0]?.delta?.content ?? ""));
  await expect(measureSpeed(engine, { quick: true, batches: [1] })).rejects.toThrow(
    /the engine has 0 of its 4 KV slots free \(requests in flight hold the rest\), 1 wanted/,
  );
  const rest = await Promise.all(
    its.map(async (it) => {
      let t = "";
      for (let c = await it.next(); !c.done; c = await it.next()) t += c.value.choices[0]?.delta?.content ?? "";
      return t;
    }),
  );
  expect(texts.map((t, i) => t + rest[i])).toEqual(new Array(4).fill(choice));
  expect(await reply()).toBe(await reply()); // and the engine serves on
});

it("keeps its bandwidth test within the memory budget: refused, naming the budget, where the plan leaves too little", async () => {
  const gpu = await createDevice();
  // A budget 4 MiB over the engine's plan: the quick copy needs 2 x 8 MiB.
  const tight = await Engine.load(MODEL_DIR, {
    gpu,
    name: "tight",
    kvSlots: 4,
    maxContext: 256,
    memoryBudget: engine.plan.total + 4 * 2 ** 20,
  });
  try {
    expect(tight.plan.total).toBe(engine.plan.total);
    const live = gpu.memory.liveBytes;
    await expect(measureSpeed(tight, { quick: true })).rejects.toThrow(
      /the memory budget \(\d+ MiB\) leaves 4 MiB beside the engine's plan and what the device holds; the bandwidth test needs 2 x 8 MiB/,
    );
    expect(gpu.memory.liveBytes).toBe(live);
  } finally {
    await tight.close();
    gpu.destroy();
  }
});

it("times a GRPO step on the engine's adapter as the planner has it run, leaving the adapter's weights as they were", async () => {
  const gpu = await createDevice();
  const lora = { rank: 8, targets: [...LORA_TARGETS] };
  const e = await Engine.load(MODEL_DIR, {
    gpu,
    name: "train",
    kvSlots: 2,
    maxContext: 512,
    train: { lora, microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens },
  });
  try {
    await expect(measureSpeed(e, { quick: true, batches: [1], train: { batch: 2, length: 64 } })).rejects.toThrow(
      "measureSpeed: train times the engine's adapter; attach one first (Engine.attachLora)",
    );
    const state = e.attachLora(lora);
    state.write(new Rng(3).f32(state.size, -0.05, 0.05));
    const before = await gpu.readF32(state.params, state.size);
    // A whole default micro-batch (8 x 512 = 4096 tokens), where the plan is tight: the GRPO meta's fourth word a row
    // (the KL weight) went uncounted, and the peak was 12 KiB over the plan.
    const r = await measureSpeed(e, { quick: true, batches: [1], train: { batch: 8, length: 512 } });
    const t = r.train!;
    expect([t.batch, t.length, t.recompute]).toEqual([8, 512, false]);
    expect(t.microBatchTokens).toBe(DEFAULT_TRAIN_CONFIG.microBatchTokens);
    expect(t.tokensPerSec).toBeCloseTo(4096 / t.seconds, 6);
    expect(t.peakBytes).toBeGreaterThan(gpu.memory.liveBytes); // the step's working set came and went
    expect(t.peakBytes).toBeLessThanOrEqual(t.plannedBytes);
    expect(t.peakBytes / t.plannedBytes).toBeGreaterThan(0.95);
    expect(await gpu.readF32(state.params, state.size)).toEqual(before); // AdamW at lr 0
    expect(speedLines(r).find((l) => l.startsWith("GRPO step:"))).toMatch(
      /^GRPO step: +[\d.]+ s for 8 x 512 tokens, [\d.]+ tokens\/s \(micro-batches of \d+ tokens, recompute off\); peak [\d.]+ MiB, planned [\d.]+ MiB$/,
    );
    // A short step (2 x 64) is planned at what its one micro-batch holds, not at the run's 4 096 tokens: before,
    // it was planned at 117 MiB for a 12 MiB peak.
    const short = (await measureSpeed(e, { quick: true, batches: [1], train: { batch: 2, length: 64 } })).train!;
    expect(short.microBatchTokens).toBe(128);
    expect(short.peakBytes).toBeLessThanOrEqual(short.plannedBytes);
    expect(short.peakBytes / short.plannedBytes).toBeGreaterThan(0.95);
    expect(gpu.errors).toEqual([]);
  } finally {
    await e.close();
    gpu.destroy();
  }
});
