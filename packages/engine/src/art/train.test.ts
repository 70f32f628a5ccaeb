// The ART-style API end to end on the embedded model: learning happens on a toy task with a verifiable
// reward; checkpoints are PEFT files; exact resume after a "crash"; nothing-trainable is loud.
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { getDevice } from "@webart/engine/gpu";
import { LocalBackend } from "./local-backend.ts";
import { TrainableModel } from "./model.ts";
import { gatherTrajectoryGroups } from "./gather.ts";
import { Trajectory, type SampledChoice } from "./trajectories.ts";
import { WeightReader, memorySource, tensorToF32 } from "../weights/index.ts";

const BASE = join(import.meta.dirname, "../../../../models/webart-tiny");
const messages = [
  { role: "system" as const, content: "Answer with one token." },
  { role: "user" as const, content: "Go." },
];

/** Toy task: the reward is 1 when the single sampled token's id is a multiple of 4 (about a quarter of them). */
async function rollout(model: TrainableModel, seed: number): Promise<Trajectory> {
  const client = model.openaiClient();
  const r = await client.chat.completions.create({ model: model.getInferenceName(), messages, max_tokens: 1, temperature: 1, seed });
  const c = r.choices[0] as SampledChoice;
  return new Trajectory({ messagesAndChoices: [...messages, c], reward: c.token_ids![0] % 4 === 0 ? 1 : 0 });
}

async function step(model: TrainableModel, s: number, groups = 4, size = 8) {
  return gatherTrajectoryGroups(
    Array.from({ length: groups }, (_, g) => Array.from({ length: size }, (_, i) => () => rollout(model, 1000 * s + 100 * g + i))),
    { progressBar: "off" },
  );
}

const adapterWeights = async (bytes: Uint8Array) => {
  const r = await WeightReader.fromSource(memorySource(bytes, "adapter"));
  const out: number[] = [];
  for (const n of [...r.tensorsInfo.keys()].sort()) out.push(...tensorToF32(await r.read(n)));
  return Float32Array.from(out);
};

describe("TrainableModel + LocalBackend", () => {
  it("learns a toy task: mean reward from below 0.4 to above 0.8 within 40 steps", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-learn-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 32, maxContext: 64 } });
    const model = new TrainableModel({ name: "toy", project: "test", baseModel: BASE, lora: { rank: 8, alpha: 16 } });
    await model.register(backend);
    const engine = backend.engine(model.spec);
    const base0 = await (await getDevice()).readF32(engine.model.weights.layers[0].q.buffer);
    const rewards: number[] = [];
    let s = await model.getStep();
    for (; s < 40; s++) {
      const groups = await step(model, s);
      const r = await model.train(groups, { learningRate: 2e-2, maxGradNorm: 1, weightDecay: 0 });
      rewards.push(r.metrics.reward);
      if (rewards.length >= 3 && rewards.slice(-3).reduce((a, b) => a + b) / 3 > 0.85) break;
    }
    const first = rewards[0];
    const last = rewards.slice(-3).reduce((a, b) => a + b) / Math.min(3, rewards.length);
    console.log(`toy task: reward ${first.toFixed(3)} -> ${last.toFixed(3)} in ${rewards.length} steps`);
    expect(first).toBeLessThan(0.4);
    expect(last).toBeGreaterThan(0.8);
    // The adapter moved; the frozen base weights did not.
    const ck0 = readFileSync(join(dir, "test/models/toy/checkpoints/0000/adapter_model.safetensors"));
    const ckN = readFileSync(join(dir, `test/models/toy/checkpoints/${String(rewards.length).padStart(4, "0")}/adapter_model.safetensors`));
    const a0 = await adapterWeights(ck0);
    const aN = await adapterWeights(ckN);
    expect(a0.some((v, i) => v !== aN[i])).toBe(true);
    const base1 = await (await getDevice()).readF32(engine.model.weights.layers[0].q.buffer);
    expect(base1).toEqual(base0);
    // PEFT layout on disk.
    const cfg = JSON.parse(readFileSync(join(dir, "test/models/toy/checkpoints/0001/adapter_config.json"), "utf8"));
    expect(cfg).toMatchObject({ peft_type: "LORA", r: 8, lora_alpha: 16 });
    expect(cfg.target_modules).toEqual(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]);
    const hist = readFileSync(join(dir, "test/models/toy/history.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(hist.length).toBe(rewards.length);
    expect(hist[0]).toHaveProperty("train/grad_norm");
    expect(existsSync(join(dir, "test/models/toy/trajectories/train/0001.jsonl"))).toBe(true);
    await backend.close();
  }, 300_000);

  it("resumes exactly: 3 steps straight = 1 step, crash, resume, 2 steps (LoRA within 1e-6)", async () => {
    const train = async (dir: string, from: number, to: number) => {
      const backend = new LocalBackend({ path: dir, engine: { kvSlots: 16, maxContext: 64 } });
      const model = new TrainableModel({ name: "r", project: "p", baseModel: BASE, seed: 5 });
      await model.register(backend);
      expect(await model.getStep()).toBe(from);
      for (let s = from; s < to; s++) await model.train(await step(model, s, 2, 4), { learningRate: 1e-2 });
      // No close(): the process "dies" here; the next backend starts from the files alone.
      return (await backend.adapterFiles(model.spec)).files["adapter_model.safetensors"];
    };
    const straight = await train(mkdtempSync(join(tmpdir(), "webart-a-")), 0, 3);
    const dir = mkdtempSync(join(tmpdir(), "webart-b-"));
    await train(dir, 0, 1);
    const resumed = await train(dir, 1, 3);
    const a = await adapterWeights(straight);
    const b = await adapterWeights(resumed);
    let d = 0;
    for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
    expect(d).toBeLessThanOrEqual(1e-6);
    expect(a.some((v) => v !== 0)).toBe(true);
  }, 300_000);

  it("refuses trajectories with nothing trainable, and advances when no group has variance", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-c-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 64 } });
    const model = new TrainableModel({ name: "z", project: "p", baseModel: BASE });
    await model.register(backend);
    const plain = new Trajectory({ messagesAndChoices: [...messages, { role: "assistant", content: "x" }], reward: 1 });
    await expect(model.train([new (await import("./trajectories.ts")).TrajectoryGroup([plain, plain])])).rejects.toThrow(/no trainable assistant turn/);
    const groups = await step(model, 0, 1, 2);
    for (const t of groups[0].trajectories) t.reward = 0.5;
    const r = await model.train(groups);
    expect(r.step).toBe(1);
    expect(r.metrics.skipped).toBe(true);
    expect(r.metrics.num_groups_trainable).toBe(0);
    expect(await model.getStep()).toBe(1);
    await backend.close();
  });
});
