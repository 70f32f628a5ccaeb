// The ART-style API end to end on the embedded model: learning happens on a toy task with a verifiable
// reward; checkpoints are PEFT files; exact resume after a "crash"; nothing-trainable is loud.
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { Rng, getDevice } from "@webart/gpu";
import { parseConfig } from "../config/index.ts";
import { randomWeights } from "../model/init.ts";
import { LocalBackend } from "./local-backend.ts";
import { TrainableModel } from "./model.ts";
import { gatherTrajectoryGroups } from "./gather.ts";
import { Trajectory, TrajectoryGroup, type SampledChoice } from "./trajectories.ts";
import { WeightReader, memorySource, tensorToF32 } from "../weights/index.ts";

const BASE = join(import.meta.dirname, "../../../../models/webart-tiny");
const messages = [{ role: "user" as const, content: "Go." }];

/**
 * A toy task with a verifiable reward: reply with one token from a fixed fifth of the vocabulary (the
 * tokens whose LM-head rows point most along a random direction, so a LoRA can reach them). The model is
 * the embedded model's shape with random weights and an untied head, written to a temp folder.
 */
async function toyModel(): Promise<{ dir: string; target: Set<number> }> {
  const dir = mkdtempSync(join(tmpdir(), "webart-toy-"));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(BASE, f), join(dir, f));
  const cj = { ...JSON.parse(readFileSync(join(BASE, "config.json"), "utf8")), tie_word_embeddings: false };
  writeFileSync(join(dir, "config.json"), JSON.stringify(cj));
  const cfg = parseConfig(cj);
  const bytes = randomWeights(cfg, { headStd: 0.1, seed: 3 });
  writeFileSync(join(dir, "model.safetensors"), bytes);
  const head = tensorToF32(await (await WeightReader.fromSource(memorySource(bytes, "m"))).read("lm_head.weight"));
  const rng = new Rng(9);
  const C = cfg.hiddenSize;
  const d = Float32Array.from({ length: C }, () => rng.normal());
  const proj = Array.from({ length: cfg.vocabSize }, (_, t) =>
    head.subarray(t * C, (t + 1) * C).reduce((s, x, i) => s + x * d[i], 0),
  );
  const thr = [...proj].sort((a, b) => b - a)[Math.floor(cfg.vocabSize / 5)];
  return { dir, target: new Set(proj.flatMap((p, t) => (p > thr ? [t] : []))) };
}

let toy: { dir: string; target: Set<number> };
const reward = (c: SampledChoice) => (toy.target.has(c.token_ids![0]) ? 1 : 0);

async function rollout(model: TrainableModel, seed: number): Promise<Trajectory> {
  const client = model.openaiClient();
  const r = await client.chat.completions.create({
    model: model.getInferenceName(),
    messages,
    max_tokens: 1,
    temperature: 1,
    seed,
  });
  const c = r.choices[0] as SampledChoice;
  return new Trajectory({ messagesAndChoices: [...messages, c], reward: reward(c) });
}

async function step(model: TrainableModel, s: number, groups = 2, size = 8) {
  return gatherTrajectoryGroups(
    Array.from({ length: groups }, (_, g) =>
      Array.from({ length: size }, (_, i) => () => rollout(model, 1000 * s + 100 * g + i)),
    ),
    { progressBar: "off" },
  );
}

const adapterWeights = async (bytes: Uint8Array) => {
  const r = await WeightReader.fromSource(memorySource(bytes, "adapter"));
  const out: number[] = [];
  for (const n of [...r.tensorsInfo.keys()].sort()) out.push(...tensorToF32(await r.read(n)));
  return Float32Array.from(out);
};

beforeAll(async () => void (toy = await toyModel()));

describe("TrainableModel + LocalBackend", () => {
  it("learns a toy task: mean reward from below 0.4 to above 0.8 within 40 steps", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-learn-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 32, maxContext: 64 } });
    const model = new TrainableModel({
      name: "toy",
      project: "test",
      baseModel: toy.dir,
      lora: { rank: 8, alpha: 16 },
    });
    await model.register(backend);
    const engine = backend.engine(model.spec);
    const base0 = await (await getDevice()).readF32(engine.model.weights.layers[0].q.buffer);
    const rewards: number[] = [];
    let s = await model.getStep();
    for (; s < 40; s++) {
      const groups = await step(model, s);
      const r = await model.train(groups, { learningRate: 5e-3, maxGradNorm: 1, weightDecay: 0 });
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
    const ckN = readFileSync(
      join(dir, `test/models/toy/checkpoints/${String(rewards.length).padStart(4, "0")}/adapter_model.safetensors`),
    );
    const a0 = await adapterWeights(ck0);
    const aN = await adapterWeights(ckN);
    expect(a0.some((v, i) => v !== aN[i])).toBe(true);
    const base1 = await (await getDevice()).readF32(engine.model.weights.layers[0].q.buffer);
    expect(base1).toEqual(base0);
    // PEFT layout on disk.
    const cfg = JSON.parse(readFileSync(join(dir, "test/models/toy/checkpoints/0001/adapter_config.json"), "utf8"));
    expect(cfg).toMatchObject({ peft_type: "LORA", r: 8, lora_alpha: 16 });
    expect(cfg.target_modules).toEqual(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]);
    const hist = readFileSync(join(dir, "test/models/toy/history.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(hist.length).toBe(rewards.length);
    expect(hist[0]).toHaveProperty("train/grad_norm");
    expect(existsSync(join(dir, "test/models/toy/trajectories/train/0001.jsonl"))).toBe(true);
    await backend.close();
  }, 300_000);

  it("resumes exactly: 3 steps straight = 1 step, crash, resume, 2 steps (LoRA within 1e-6)", async () => {
    const train = async (dir: string, from: number, to: number) => {
      const backend = new LocalBackend({ path: dir, engine: { kvSlots: 16, maxContext: 64 } });
      const model = new TrainableModel({ name: "r", project: "p", baseModel: toy.dir, seed: 5 });
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

  it("maxHistoriesPerTrajectory trains on the sampled histories only", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-h-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 64 } });
    const model = new TrainableModel({ name: "h", project: "p", baseModel: toy.dir });
    await model.register(backend);
    // Trajectories of 5 one-token histories each (like 2048's one history per move); rewards alternate.
    const client = model.openaiClient();
    const many = async (seed: number, reward: number) => {
      const hs = [];
      for (let k = 0; k < 5; k++) {
        const r = await client.chat.completions.create({
          model: model.getInferenceName(),
          messages,
          max_tokens: 1,
          temperature: 1,
          seed: seed + k,
        });
        hs.push({ messagesAndChoices: [...messages, r.choices[0] as SampledChoice] });
      }
      return new Trajectory({ messagesAndChoices: hs[0].messagesAndChoices, additionalHistories: hs.slice(1), reward });
    };
    const group = new TrajectoryGroup(await Promise.all([0, 1, 2, 3].map((i) => many(100 * i, i % 2))));
    const all = await model.train([group], { learningRate: 1e-4 });
    expect(all.metrics.num_tokens_trained).toBe(4 * 5);
    const two = await model.train([group], { learningRate: 1e-4, maxHistoriesPerTrajectory: 2 });
    expect(two.metrics.num_tokens_trained).toBe(4 * 2);
    await backend.close();
  });

  it("backend.train(model, groups) is ART's: { step, metrics, checkpointPath }; model.log records at a step", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-bt-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 64 } });
    // Per-module ranks and alphas train too (PEFT's rank_pattern / alpha_pattern in the checkpoint).
    const lora = { rank: 2, alpha: 4, rankPattern: { down_proj: 3 }, alphaPattern: { "layers.0.self_attn.q_proj": 1 } };
    const model = new TrainableModel({ name: "bt", project: "p", baseModel: toy.dir, lora });
    await model.register(backend);
    const groups = await step(model, 0, 1, 4);
    for (const [i, t] of groups[0].trajectories.entries()) t.reward = i % 2;
    const r = await backend.train(model, groups, { learningRate: 1e-3 });
    expect(r.step).toBe(1);
    expect(r.metrics.num_trajectories).toBe(4);
    expect(r.checkpointPath).toBe(join(dir, "p/models/bt/checkpoints/0001"));
    expect(existsSync(join(r.checkpointPath, "adapter_model.safetensors"))).toBe(true);
    expect(JSON.parse(readFileSync(join(r.checkpointPath, "adapter_config.json"), "utf8"))).toMatchObject({
      r: 2,
      rank_pattern: { down_proj: 3 },
      alpha_pattern: { "layers.0.self_attn.q_proj": 1 },
    });
    const ad = await WeightReader.fromSource(
      memorySource(new Uint8Array(readFileSync(join(r.checkpointPath, "adapter_model.safetensors"))), "a"),
    );
    expect(ad.tensorsInfo.get("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight")!.shape[0]).toBe(3);
    expect(ad.tensorsInfo.get("base_model.model.model.layers.1.mlp.up_proj.lora_A.weight")!.shape[0]).toBe(2);
    const moved = await adapterWeights(readFileSync(join(r.checkpointPath, "adapter_model.safetensors")));
    const start = await adapterWeights(
      readFileSync(join(dir, "p/models/bt/checkpoints/0000/adapter_model.safetensors")),
    );
    expect(moved.some((v, i) => v !== start[i])).toBe(true);
    // model.train still works and is the same call.
    expect((await model.train(groups, { learningRate: 1e-3 })).checkpointPath).toBe(
      join(dir, "p/models/bt/checkpoints/0002"),
    );
    // ART's flow: log the step's groups and metrics under a split at a step; or metrics alone.
    await model.log(groups, { split: "val", metrics: { judged: 1 }, step: 1 });
    await model.log(null, { split: "test", metrics: { accuracy: 0.25 } });
    expect(existsSync(join(dir, "p/models/bt/trajectories/val/0001.jsonl"))).toBe(true);
    const hist = await backend.history(model.spec);
    expect(hist.find((h) => "val/reward" in h)).toMatchObject({ step: 1, "val/reward": 0.5, "val/judged": 1 });
    expect(hist.at(-1)).toMatchObject({ step: 2, "test/accuracy": 0.25 });
    expect(existsSync(join(dir, "p/models/bt/trajectories/test"))).toBe(false);
    await backend.close();
    // Registered again (a restart), the run resumes from the patterned checkpoint it wrote.
    const again = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 64 } });
    const resumed = new TrainableModel({ name: "bt", project: "p", baseModel: toy.dir, lora });
    await resumed.register(again);
    expect(await resumed.getStep()).toBe(2);
    await again.close();
  });

  it("refuses trajectories with nothing trainable or no reward, and advances when no group has variance", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-c-"));
    const backend = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 64 } });
    const model = new TrainableModel({ name: "z", project: "p", baseModel: toy.dir });
    await model.register(backend);
    const plain = new Trajectory({ messagesAndChoices: [...messages, { role: "assistant", content: "x" }], reward: 1 });
    await expect(model.train([new TrajectoryGroup([plain, plain])])).rejects.toThrow(/no trainable assistant turn/);
    const groups = await step(model, 0, 1, 2);
    // A trajectory whose reward was never set is refused by name, not trained as 0; the step does not advance.
    const [first, second] = groups[0].trajectories;
    const unset = new Trajectory({ messagesAndChoices: second.messagesAndChoices });
    await expect(model.train([new TrajectoryGroup([first, unset])])).rejects.toThrow(
      "train: trajectory 1 of group 0 has no reward: set trajectory.reward before training",
    );
    expect(await model.getStep()).toBe(0);
    for (const t of groups[0].trajectories) t.reward = 0.5;
    const r = await model.train(groups);
    expect(r.step).toBe(1);
    expect(r.metrics.skipped).toBe(true);
    expect(r.metrics.num_groups_trainable).toBe(0);
    expect(await model.getStep()).toBe(1);
    // The step made no update, so AdamW's bias correction has counted none.
    const opt = await WeightReader.fromSource(
      memorySource(readFileSync(join(dir, "p/models/z/checkpoints/0001/optimizer.safetensors")), "optimizer"),
    );
    expect(opt.metadata).toMatchObject({ step: "1", updates: "0" });
    await backend.close();
  });
});
