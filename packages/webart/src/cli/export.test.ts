// `webart export --format art` on a real run (the embedded model trained one step through LocalBackend, and an
// evaluation logged): the folder ART's LocalBackend(path=...) reads, each Choice carrying what ART trains from, and
// the token sequence ART would rebuild from it equal to the one webart trained on. With python3, pydantic and openai
// present, scripts/art_validate.py (ART's models) validates the files too.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  EMBEDDED_MODEL,
  Engine,
  LocalBackend,
  openTokenizer,
  tokenizeHistory,
  TrainableModel,
  Trajectory,
  TrajectoryGroup,
  type Message,
  type SampledChoice,
} from "@webart/engine";
import { exportCommand } from "./export.ts";

const ROOT = join(import.meta.dirname, "../../../..");
const PYTHON = process.env.WEBART_PYTHON ?? "python3";
const messages: Message[] = [
  { role: "system" as const, content: "Play tic-tac-toe. Answer with <move>B2</move>." },
  { role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" },
];

let runs: string;
let out: string;
let backend: LocalBackend;
let model: TrainableModel;
/** What webart trained on: each trajectory's token ids (context + sampled). */
const trained: number[][] = [];

beforeAll(async () => {
  runs = mkdtempSync(join(tmpdir(), "webart-export-runs-"));
  out = mkdtempSync(join(tmpdir(), "webart-export-out-"));
  backend = new LocalBackend({ path: runs, engine: { kvSlots: 8, maxContext: 256 } });
  model = new TrainableModel({ name: "agent", project: "ttt", baseModel: EMBEDDED_MODEL, lora: { rank: 2, alpha: 4 } });
  await model.register(backend);
  const client = model.openaiClient();
  const sample = async (seed: number, msgs = messages) =>
    (
      await client.chat.completions.create({
        model: model.getInferenceName(),
        messages: msgs,
        max_tokens: 4,
        temperature: 1,
        seed,
      })
    ).choices[0] as SampledChoice;
  const trajectories = [];
  for (let i = 0; i < 2; i++) {
    const first = await sample(10 + i);
    // A second turn, and (for the second trajectory) an additional history, as multi-turn agents write them.
    const turn2 = [...messages, { role: "assistant" as const, content: first.message.content ?? "" }];
    const msgs2 = [...turn2, { role: "user" as const, content: "Again?" }];
    const second = await sample(20 + i, msgs2);
    const extra = i === 1 ? [{ messagesAndChoices: [...messages, await sample(30)] }] : [];
    trajectories.push(
      new Trajectory({
        messagesAndChoices: [...messages, first, msgs2[msgs2.length - 1], second],
        additionalHistories: extra,
        reward: i,
        metrics: { win: i === 1, moves: 2 },
        metadata: { scenario: i, opponent: "random" },
        logs: [`game ${i}`],
      }),
    );
  }
  const group = new TrajectoryGroup(trajectories);
  const tok = await openTokenizer(EMBEDDED_MODEL);
  for (const t of trajectories)
    trained.push(...t.histories().flatMap((h) => tokenizeHistory(tok, h).map((s) => s.ids)));
  await backend.train(model, [group], { learningRate: 1e-3 });
  await model.log([group], { split: "val" });
}, 300_000);

afterAll(() => backend?.close());

const lines = (p: string) =>
  readFileSync(p, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

describe("webart export --format art", () => {
  it("writes ART's run folder: model.json, history, the latest checkpoint's adapter, trajectories per split", async () => {
    const logs: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => void logs.push(a.join(" "));
    try {
      const code = await exportCommand([
        "--runs",
        runs,
        "--out",
        out,
        "--project",
        "ttt",
        "--name",
        "agent",
        "--base-model",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
      ]);
      expect(code).toBe(0);
    } finally {
      console.log = log;
    }
    const run = join(out, "ttt/models/agent");
    expect(JSON.parse(readFileSync(join(run, "model.json"), "utf8"))).toMatchObject({
      name: "agent",
      project: "ttt",
      trainable: true,
      base_model: "HuggingFaceTB/SmolLM2-135M-Instruct",
    });
    expect(readdirSync(join(run, "checkpoints"))).toEqual(["0001"]);
    expect(readdirSync(join(run, "checkpoints/0001")).sort()).toEqual([
      "adapter_config.json",
      "adapter_model.safetensors",
    ]);
    expect(JSON.parse(readFileSync(join(run, "checkpoints/0001/adapter_config.json"), "utf8"))).toMatchObject({
      peft_type: "LORA",
      r: 2,
      lora_alpha: 4,
      base_model_name_or_path: "HuggingFaceTB/SmolLM2-135M-Instruct",
    });
    expect(readFileSync(join(run, "history.jsonl"), "utf8")).toBe(
      readFileSync(join(runs, "ttt/models/agent/history.jsonl"), "utf8"),
    );
    expect(existsSync(join(run, "trajectories/train/0001.jsonl"))).toBe(true);
    expect(existsSync(join(run, "trajectories/val/0001.jsonl"))).toBe(true);
    // The printed Python continues this folder with ART.
    const text = logs.join("\n");
    expect(text).toContain(`await model.register(LocalBackend(path=${JSON.stringify(out)}))`);
    expect(text).toContain('peft_args={"r":2,"lora_alpha":4,"target_modules":["q_proj",');
  });

  it("each Choice carries vLLM-style logprobs and token ids; ART's rebuilt sequences are what webart trained on", () => {
    const [group] = lines(join(out, "ttt/models/agent/trajectories/train/0001.jsonl"));
    expect(Object.keys(group).sort()).toEqual(["exceptions", "trajectories"]);
    const rebuilt: number[][] = [];
    for (const t of group.trajectories) {
      expect(Object.keys(t).sort()).toEqual([
        "additional_histories",
        "logs",
        "messages_and_choices",
        "metadata",
        "metrics",
        "reward",
        "tools",
      ]);
      for (const h of [t, ...t.additional_histories]) {
        // As newer ART does: a Choice whose prompt extends the sequence so far adds its new prompt tokens and its
        // sampled ids; one whose prompt does not (a re-rendered history) starts a new sequence.
        let seq: number[] = [];
        for (const m of h.messages_and_choices) {
          if (!("message" in m)) {
            expect(typeof m.role).toBe("string");
            continue;
          }
          expect(m).not.toHaveProperty("token_logprobs");
          expect(m).not.toHaveProperty("trainable");
          const ids: number[] = m.token_ids;
          const content = m.logprobs.content as { token: string; logprob: number; bytes: number[]; top_logprobs: [] }[];
          expect(content.map((e) => e.token)).toEqual(ids.map((i) => `token_id:${i}`));
          for (const e of content) {
            expect(e.logprob).toBeLessThanOrEqual(0);
            expect(e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256)).toBe(true);
            expect(e.top_logprobs).toEqual([]);
          }
          expect(m.logprobs.refusal).toBeNull();
          const prompt: number[] = m.prompt_token_ids;
          const extends_ = prompt.length >= seq.length && seq.every((id, k) => prompt[k] === id);
          if (!extends_) rebuilt.push(seq);
          seq = [...prompt, ...ids];
        }
        rebuilt.push(seq);
      }
    }
    expect(rebuilt).toEqual(trained);
    // The sampler's logprobs, unchanged.
    const original = lines(join(runs, "ttt/models/agent/trajectories/train/0001.jsonl"))[0];
    const c0 = original.trajectories[0].messages_and_choices[2];
    expect(
      group.trajectories[0].messages_and_choices[2].logprobs.content.map((e: { logprob: number }) => e.logprob),
    ).toEqual(c0.token_logprobs);
    expect(group.trajectories[1]).toMatchObject({
      reward: 1,
      metrics: { win: true, moves: 2 },
      metadata: { scenario: 1, opponent: "random" },
      logs: ["game 1"],
    });
  });

  const py = spawnSync(PYTHON, ["-c", "import pydantic, openai"], { encoding: "utf8" });
  const why = py.error ? `${PYTHON} not found` : py.status !== 0 ? `${PYTHON} lacks pydantic or openai` : null;
  if (why) console.log(`export.test.ts: ART's pydantic models not checked: ${why}`);
  it.skipIf(why !== null)("validates against ART's models (pydantic, OpenAI's Choice) in Python", () => {
    const files = ["train", "val"].map((s) => join(out, `ttt/models/agent/trajectories/${s}/0001.jsonl`));
    const r = spawnSync(PYTHON, [join(ROOT, "scripts/art_validate.py"), ...files], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`scripts/art_validate.py failed:\n${r.stderr}`);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ groups: 2, trajectories: 4, choices: 10 });
    expect(summary.tokens).toBeGreaterThan(0);
  });

  it("refuses what it cannot export, by name", async () => {
    await expect(exportCommand(["--runs", runs, "--out", out, "--project", "ttt", "--name", "nope"])).rejects.toThrow(
      "ttt/models/nope/model.json: not found or not a trainable run",
    );
    await expect(exportCommand(["--runs", runs, "--out", runs, "--project", "ttt"])).rejects.toThrow(
      "--out: must differ from --runs",
    );
  });
});

describe("webart export --format merged", () => {
  it("writes the checkpoint merged into its base as a model folder that answers as base + adapter does", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "webart-merged-")), "agent-merged");
    const logs: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => void logs.push(a.join(" "));
    try {
      const args = ["--format", "merged", "--runs", runs, "--project", "ttt", "--name", "agent", "--out", dir];
      expect(await exportCommand(args)).toBe(0);
    } finally {
      console.log = log;
    }
    expect(logs.join("\n")).toMatch(/^merged ttt\/agent checkpoint 1 into webart-tiny: \d+ projections; wrote /);
    // The embedded model's own files, and the merged weights.
    expect(readdirSync(dir).sort()).toEqual([
      "config.json",
      "generation_config.json",
      "model.safetensors",
      "tokenizer.json",
      "tokenizer_config.json",
    ]);
    // The merged model alone answers with the logprobs the base model gives with the run's adapter.
    const merged = await Engine.load(dir, { name: "merged", kvSlots: 2, maxContext: 256 });
    try {
      const ask = async (client: ReturnType<Engine["openaiClient"]>, name: string) =>
        (
          await client.chat.completions.create({
            model: name,
            messages,
            max_tokens: 3,
            temperature: 0,
            logprobs: true,
            top_logprobs: 5,
          })
        ).choices[0].logprobs!.content!;
      const want = await ask(model.openaiClient(), model.getInferenceName());
      const got = await ask(merged.openaiClient(), "merged");
      expect(got.map((t) => t.token)).toEqual(want.map((t) => t.token));
      for (const [i, t] of got.entries()) {
        expect(t.top_logprobs.map((x) => x.token)).toEqual(want[i].top_logprobs.map((x) => x.token));
        for (const [j, x] of t.top_logprobs.entries())
          expect(x.logprob).toBeCloseTo(want[i].top_logprobs[j].logprob, 4);
      }
      // The base model without the adapter answers otherwise: the agreement above is the adapter's.
      const plain = await Engine.load(EMBEDDED_MODEL, { name: "plain", kvSlots: 2, maxContext: 256 });
      try {
        const base = await ask(plain.openaiClient(), "plain");
        const moved = Math.max(
          ...base[0].top_logprobs.map((x, j) => Math.abs(x.logprob - want[0].top_logprobs[j].logprob)),
        );
        expect(moved).toBeGreaterThan(1e-3);
      } finally {
        await plain.close();
      }
    } finally {
      await merged.close();
    }
  }, 120_000);

  it("refuses what it cannot merge, by name, and never writes into a folder that has files", async () => {
    const base = ["--format", "merged", "--runs", runs, "--project", "ttt", "--name", "agent"];
    const full = mkdtempSync(join(tmpdir(), "webart-merged-full-"));
    writeFileSync(join(full, "keep.txt"), "mine");
    await expect(exportCommand([...base, "--out", full])).rejects.toThrow(/--out .* is not empty/);
    expect(readdirSync(full)).toEqual(["keep.txt"]);
    await expect(exportCommand([...base, "--out", join(full, "keep.txt")])).rejects.toThrow(/keep\.txt is a file/);
    const fresh = join(full, "new");
    await expect(exportCommand([...base, "--out", fresh, "--checkpoint", "7"])).rejects.toThrow(
      "run ttt/agent has no checkpoint 7 (it has 0, 1)",
    );
    await expect(exportCommand([...base, "--out", fresh, "--checkpoints", "all"])).rejects.toThrow(
      "--checkpoints is not for --format merged",
    );
    await expect(exportCommand([...base, "--name", "nope", "--out", fresh])).rejects.toThrow(/^no run ttt\/nope in /);
    expect(existsSync(fresh)).toBe(false);
  });
});
