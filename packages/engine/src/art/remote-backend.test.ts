// RemoteBackend against a real `webart serve` child process on 127.0.0.1 (the embedded model): a training
// loop of 2 steps, checkpoints and adapter downloads, log/history/pruning, errors, and kill -9 mid-step
// followed by a restart with the same arguments: the next chat registers the model again, which resumes at
// the last complete step.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TrainableModel } from "./model.ts";
import { RemoteBackend, RemoteError } from "./remote-backend.ts";
import { Trajectory, TrajectoryGroup, type SampledChoice } from "./trajectories.ts";

const ROOT = join(import.meta.dirname, "../../../..");
const messages = [{ role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" }];
const tmp = (p: string) => mkdtempSync(join(tmpdir(), `webart-remote-${p}-`));

interface Served {
  url: string;
  proc: ChildProcess;
  exited: Promise<number | null>;
}

/** Starts `webart serve` as its own process and waits until it listens. */
async function serve(runs: string, port: number): Promise<Served> {
  const proc = spawn(
    process.execPath,
    [
      "packages/webart/bin/webart.js",
      "serve",
      "--port",
      String(port),
      "--runs",
      runs,
      "--kv-slots",
      "8",
      "--max-context",
      "256",
    ],
    { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
  );
  const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (c) => {
      out += c;
      const m = /(http:\/\/\S+)\/v1 serving/.exec(out);
      if (m) resolve(m[1]);
    });
    let err = "";
    proc.stderr!.on("data", (c) => (err += c));
    proc.on("exit", (code) => reject(new Error(`webart serve exited (${code}) before listening:\n${out}\n${err}`)));
  });
  return { url, proc, exited };
}

/** A port that is free now (so a restarted server can take the same arguments). */
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

/** Rollouts through the server's openai endpoint: 2 groups of 2 with rewards 1 and 0, so every trajectory trains. */
async function groups(model: TrainableModel, seed: number): Promise<TrajectoryGroup[]> {
  const client = model.openaiClient();
  const one = async (i: number) => {
    const r = await client.chat.completions.create({
      model: model.getInferenceName(),
      messages,
      max_tokens: 3,
      temperature: 1,
      seed: seed + i,
    });
    return new Trajectory({
      messagesAndChoices: [...messages, r.choices[0] as SampledChoice],
      reward: i % 2,
      metrics: { win: i % 2 === 1 },
    });
  };
  return Promise.all([0, 2].map(async (g) => new TrajectoryGroup(await Promise.all([one(g), one(g + 1)]))));
}

const runFile = (runs: string, name: string, f: string) =>
  new Uint8Array(readFileSync(join(runs, "rb/models", name, f)));

describe("RemoteBackend against webart serve", () => {
  it("runs a training loop: steps advance, checkpoints and adapters download, history and pruning work", async () => {
    const runs = tmp("loop");
    const s = await serve(runs, 0);
    try {
      const backend = new RemoteBackend(`${s.url}/v1`);
      const model = new TrainableModel({
        name: "remote",
        project: "rb",
        baseModel: "webart-tiny",
        lora: { rank: 4, alpha: 8 },
        seed: 3,
      });
      await model.register(backend);
      expect(await model.getStep()).toBe(0);
      for (let k = 1; k <= 2; k++) {
        // model.train, then ART's backend.train(model, ...): the same step, with the checkpoint's path on the server.
        const g = await groups(model, 10 * k);
        const r =
          k === 1
            ? await model.train(g, { learningRate: 1e-2 })
            : await backend.train(model, g, { learningRate: 1e-2 });
        expect(r.step).toBe(k);
        expect(r.checkpointPath).toBe(join(runs, `rb/models/remote/checkpoints/000${k}`));
        expect(r.metrics.num_trajectories).toBe(4);
        expect(r.metrics.num_groups_trainable).toBe(2);
        expect(Number.isFinite(r.metrics.loss)).toBe(true);
        expect(await model.getStep()).toBe(k);
      }
      // A trajectory without a reward is refused before anything is sent, with LocalBackend's words.
      const [g0] = await groups(model, 40);
      const unset = new Trajectory({ messagesAndChoices: g0.trajectories[0].messagesAndChoices });
      await expect(model.train([g0, new TrajectoryGroup([g0.trajectories[1], unset])])).rejects.toThrow(
        "train: trajectory 1 of group 1 has no reward: set trajectory.reward before training",
      );
      expect(await model.getStep()).toBe(2);
      expect(await backend.listCheckpoints(model.spec)).toEqual([0, 1, 2]);
      // Downloads are the checkpoint's files byte for byte; the adapter moved between steps.
      const latest = await backend.adapterFiles(model.spec);
      expect(latest.step).toBe(2);
      expect(latest.files["adapter_model.safetensors"]).toEqual(
        runFile(runs, "remote", "checkpoints/0002/adapter_model.safetensors"),
      );
      expect(JSON.parse(new TextDecoder().decode(latest.files["adapter_config.json"]))).toMatchObject({
        peft_type: "LORA",
        r: 4,
        lora_alpha: 8,
      });
      const first = await backend.adapterFiles(model.spec, 1);
      expect(first.step).toBe(1);
      expect(first.files["adapter_model.safetensors"]).toEqual(
        runFile(runs, "remote", "checkpoints/0001/adapter_model.safetensors"),
      );
      expect(first.files["adapter_model.safetensors"]).not.toEqual(latest.files["adapter_model.safetensors"]);
      // An evaluation logged at step 2; history has both train rows and it; pruning keeps the latest (= best).
      await model.log(await groups(model, 99), { split: "val", metrics: { extra: 0.5 } });
      await model.log(null, { split: "test", metrics: { accuracy: 0.25 }, step: 1 });
      const hist = await backend.history(model.spec);
      expect(hist.find((h) => "test/accuracy" in h)).toMatchObject({ step: 1, "test/accuracy": 0.25 });
      expect(hist.filter((h) => "train/loss" in h).map((h) => h.step)).toEqual([1, 2]);
      expect(hist.find((h) => "val/reward" in h)).toMatchObject({
        step: 2,
        "val/reward": 0.5,
        "val/win": 0.5,
        "val/extra": 0.5,
      });
      expect(await model.deleteCheckpoints()).toEqual([0, 1]);
      expect(await backend.listCheckpoints(model.spec)).toEqual([2]);
      const gone = await backend.adapterFiles(model.spec, 1).catch((e) => e);
      expect(gone).toBeInstanceOf(RemoteError);
      expect(gone.status).toBe(404);
      // Supervised fine-tuning on plain conversations: one step, its history row; the server's refusal of a
      // trajectory with nothing to learn is a 400 naming it, and the run stays at its step.
      const sft = [0, 1, 2].map(
        (i) =>
          new Trajectory({
            messagesAndChoices: [...messages, { role: "assistant", content: `<move>C${i + 1}</move>` }],
          }),
      );
      const s3 = await model.trainSft(sft, { learningRate: 1e-3, batchSize: 2 });
      expect([s3.step, s3.metrics.num_batches, s3.metrics.num_trajectories]).toEqual([3, 2, 3]);
      expect(s3.metrics.loss).toBeGreaterThan(0);
      expect(s3.checkpointPath).toBe(join(runs, "rb/models/remote/checkpoints/0003"));
      expect((await backend.history(model.spec)).find((h) => h.step === 3)).toMatchObject({
        "train/sft_num_batches": 2,
        "train/sft_loss": s3.metrics.loss,
      });
      const nothing = await model.trainSft([new Trajectory({ messagesAndChoices: messages })]).catch((e) => e);
      expect(nothing.status).toBe(400);
      expect(nothing.message).toMatch(/train_sft: trainSft: trajectory 0 has no assistant turn to learn from/);
      await expect(model.trainSft(sft, { batchSize: -1 })).rejects.toThrow(/TrainSftConfig.batchSize/);
      expect(await backend.listCheckpoints(model.spec)).toEqual([2, 3]);
      // The same run with other LoRA settings, or another base model, is refused by name.
      const clash = await backend.register({ ...model.spec, lora: { ...model.spec.lora, rank: 8 } }).catch((e) => e);
      expect([clash.status, clash.code]).toEqual([409, "conflict"]);
      const other = await backend.register({ ...model.spec, baseModel: "Qwen/Qwen3-0.6B" }).catch((e) => e);
      expect([other.status, other.param]).toEqual([400, "baseModel"]);
    } finally {
      s.proc.kill("SIGTERM");
      expect(await s.exited).toBe(0);
    }
  });

  it("kill -9 during a step, restart with the same arguments: the first chat registers the model again, training resumes at the last complete step", async () => {
    const runs = tmp("kill");
    const port = await freePort();
    const s = await serve(runs, port);
    const registrations: string[] = []; // POST /v1/webart/models, as the server saw them
    const backend = new RemoteBackend(s.url, {
      maxRetries: 0,
      fetch: (input, init) => {
        if (init?.method === "POST" && new URL(String(input)).pathname === "/v1/webart/models")
          registrations.push(String(init.body));
        return fetch(input, init);
      },
    });
    const model = new TrainableModel({ name: "crashy", project: "rb", baseModel: "webart-tiny", seed: 1 });
    await model.register(backend);
    expect((await model.train(await groups(model, 1), { learningRate: 1e-2 })).step).toBe(1);
    const step1 = runFile(runs, "crashy", "checkpoints/0001/adapter_model.safetensors");
    const doomed = model.train(await groups(model, 5), { learningRate: 1e-2 });
    let settled = false;
    const failed = doomed.then(
      () => false,
      () => true,
    );
    void failed.then(() => (settled = true));
    // Kill once the server reports the step running.
    for (;;) {
      const st = (await (await fetch(`${s.url}/v1/webart/status`)).json()) as { training: string[] };
      if (st.training.includes("crashy")) break;
      if (settled) throw new Error("the step ended before it was seen running");
      await new Promise((r) => setTimeout(r, 5));
    }
    s.proc.kill("SIGKILL");
    await s.exited;
    expect(await failed).toBe(true);
    const latest = Number(readFileSync(join(runs, "rb/models/crashy/latest"), "utf8"));
    expect(latest).toBeGreaterThanOrEqual(1);

    const again = await serve(runs, port);
    try {
      expect(again.url).toBe(s.url);
      // The server forgot the model. The first calls are chats (4 at once): their 404 makes RemoteBackend register
      // the model again, once, which resumes from disk, and each chat is retried and answered.
      expect(registrations).toHaveLength(1);
      const rollouts = await groups(model, 20);
      expect(registrations).toHaveLength(2);
      expect(rollouts.flatMap((g) => g.trajectories).every((t) => t.hasTrainableTurns())).toBe(true);
      expect(await model.getStep()).toBe(latest);
      expect(await backend.listCheckpoints(model.spec)).toEqual(Array.from({ length: latest + 1 }, (_, i) => i));
      if (latest === 1)
        expect((await backend.adapterFiles(model.spec)).files["adapter_model.safetensors"]).toEqual(step1);
      const r = await model.train(rollouts, { learningRate: 1e-2 });
      expect(r.step).toBe(latest + 1);
      expect((await backend.adapterFiles(model.spec)).step).toBe(latest + 1);
    } finally {
      again.proc.kill("SIGTERM");
      expect(await again.exited).toBe(0);
    }
  });
});
