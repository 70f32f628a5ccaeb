// The headless train/eval commands on the embedded model: checkpoints every step, chart and history,
// --resume, refusing to overwrite a run, --reward ruler against a judge over HTTP on 127.0.0.1.
import { cpSync, existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { requestedIds, startJudge, type ScriptedJudge } from "@webart/ruler/testing";
import { UsageError } from "../args.ts";
import { exportMerged } from "../merged.ts";
import { evalCommand } from "./eval.ts";
import { trainCommand } from "./train.ts";

const runs = mkdtempSync(join(tmpdir(), "webart-cli-"));
const tiny = ["--group-size", "2", "--groups-per-step", "2", "--max-tokens", "10", "--runs", runs];
let judge: ScriptedJudge | undefined;
afterAll(() => judge?.close());

describe("webart train / eval", () => {
  it("trains 2 steps with a checkpoint, history line and chart each step, then resumes", async () => {
    expect(await trainCommand(["--steps", "2", "--name", "a", ...tiny])).toBe(0);
    const dir = join(runs, "tictactoe/models/a");
    for (const s of ["0001", "0002"])
      expect(existsSync(join(dir, "checkpoints", s, "adapter_model.safetensors"))).toBe(true);
    expect(readFileSync(join(dir, "history.jsonl"), "utf8").trim().split("\n")).toHaveLength(2);
    expect(readFileSync(join(dir, "chart.svg"), "utf8")).toContain("<svg");
    await expect(trainCommand(["--steps", "3", "--name", "a", ...tiny])).rejects.toThrow(/pass --resume/);
    expect(await trainCommand(["--steps", "3", "--name", "a", "--resume", ...tiny])).toBe(0);
    expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("3");
    await expect(trainCommand(["--env", "chess", ...tiny])).rejects.toBeInstanceOf(UsageError);
  }, 300_000); // three runs of the CLI (load, train, checkpoint): minutes on a loaded 2-core machine

  it("--opponent: groups take the listed opponents in turn; an unknown one is a usage error", async () => {
    expect(await trainCommand(["--steps", "1", "--name", "opp", "--opponent", "random,winning", ...tiny])).toBe(0);
    const lines = readFileSync(join(runs, "tictactoe/models/opp/trajectories/train/0001.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { trajectories: { metadata: { opponent: string } }[] });
    expect(lines.map((g) => g.trajectories.map((t) => t.metadata.opponent))).toEqual([
      ["random", "random"],
      ["winning", "winning"],
    ]);
    await expect(trainCommand(["--opponent", "random,chess", ...tiny])).rejects.toThrow(
      /--opponent "chess": expected random, winning, blocking or minimax/,
    );
  });

  it("--max-groups: more groups are drawn only while too few vary, never past the cap; below --groups-per-step is refused", async () => {
    const args = ["--steps", "1", "--name", "dyn", "--max-groups", "5", "--temperature", "2", ...tiny];
    expect(await trainCommand(args)).toBe(0);
    const rewards = readFileSync(join(runs, "tictactoe/models/dyn/trajectories/train/0001.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => (JSON.parse(l) as { trajectories: { reward: number }[] }).trajectories.map((t) => t.reward));
    const varies = rewards.map((r) => new Set(r).size > 1);
    expect(rewards.length).toBeGreaterThanOrEqual(2);
    expect(rewards.length).toBeLessThanOrEqual(5);
    // Each draw after the first two is of the groups still missing, so the step stops once two vary or five are drawn.
    if (rewards.length > 2) expect(varies.slice(0, 2).filter(Boolean).length).toBeLessThan(2);
    if (rewards.length < 5) expect(varies.filter(Boolean).length).toBeGreaterThanOrEqual(2);
    await expect(trainCommand(["--max-groups", "1", ...tiny])).rejects.toThrow(/--max-groups "1"/);
  });

  it("--memory-budget: a run that cannot fit is refused before loading, naming the plan's parts; a bad size is a usage error", async () => {
    const err = await trainCommand(["--steps", "1", "--name", "small", "--memory-budget", "4MiB", ...tiny]).catch(
      (e: Error) => e,
    );
    expect((err as Error).name).toBe("PlanError");
    expect((err as Error).message).toMatch(/memory budget is 4\.0 MiB\. Largest parts: /);
    expect((err as Error).message).toMatch(/To fit: fewer tokens per micro-batch/);
    expect(existsSync(join(runs, "tictactoe/models/small/checkpoints"))).toBe(false);
    await expect(trainCommand(["--memory-budget", "lots", ...tiny])).rejects.toThrow(
      /--memory-budget "lots" is not a size/,
    );
  });

  it("--reward ruler: a judge on 127.0.0.1 scores every group and training completes 2 steps", async () => {
    // The judge scores trajectory "1" high and the rest low, so every group has variance to learn from.
    judge = await startJudge((req) => ({
      content: JSON.stringify({
        scores: requestedIds(req).map((id) => ({
          trajectory_id: id,
          explanation: `judged ${id}`,
          score: id === "1" ? 0.9 : 0.2,
        })),
      }),
    }));
    process.env.WEBART_TEST_JUDGE_KEY = "test-key-123456";
    const code = await trainCommand([
      "--steps",
      "2",
      "--name",
      "r",
      "--reward",
      "ruler",
      "--judge-base-url",
      judge.baseURL,
      "--judge-model",
      "judge",
      "--judge-api-key-env",
      "WEBART_TEST_JUDGE_KEY",
      "--judge-temperature",
      "0",
      ...tiny,
      // The embedded model plays almost deterministically, and a group's games share their seed (the agent's
      // symbol, the opponent's moves), so its games can come out the same: RULER then judges one and copies its
      // score, and the group has nothing to learn. At temperature 2, from the empty board, four games a group still
      // came out the same now and then (CI, 2026-11-28). With half the training moves a random empty cell
      // (--explore 0.5) the games of a group differ, so the judge sees more than one.
      "--start",
      "empty",
      "--temperature",
      "2",
      "--explore",
      "0.5",
      "--group-size",
      "4",
    ]);
    expect(code).toBe(0);
    expect(judge.requests.length).toBeGreaterThanOrEqual(4);
    expect(judge.requests[0].headers.authorization).toBe("Bearer test-key-123456");
    expect(judge.requests.every((r) => r.body.temperature === 0 && !("seed" in r.body))).toBe(true);
    const hist = readFileSync(join(runs, "tictactoe/models/r/history.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(hist).toHaveLength(2);
    expect(hist[0]["train/num_groups_trainable"]).toBe(2);
    // The key never reaches the run's files.
    const traj = readFileSync(join(runs, "tictactoe/models/r/trajectories/train/0001.jsonl"), "utf8");
    expect(traj).toContain("RULER score 0.9: judged 1");
    expect(traj).not.toContain("test-key-123456");
  });

  it("--env 2048 --max-histories 1: a step trains on the move that ended each game; a bad value is refused", async () => {
    type Choice = { logprobs: { content: unknown[] } };
    type Game = {
      reward: number;
      messages_and_choices: Choice[];
      additional_histories: { messages_and_choices: Choice[] }[];
    };
    // Every move is trained by default (as ART does); one move a game keeps this test short on a CPU.
    const args = [
      "--env",
      "2048",
      "--steps",
      "1",
      "--name",
      "g",
      "--group-size",
      "4",
      "--groups-per-step",
      "1",
      "--runs",
      runs,
      "--max-histories",
      "1",
    ];
    expect(await trainCommand(args)).toBe(0);
    const dir = join(runs, "2048/models/g");
    const row = JSON.parse(readFileSync(join(dir, "history.jsonl"), "utf8").trim());
    const games: Game[] = readFileSync(join(dir, "trajectories/train/0001.jsonl"), "utf8")
      .trim()
      .split("\n")
      .flatMap((l) => JSON.parse(l).trajectories);
    expect(games).toHaveLength(4);
    const histories = games.map((g) => [
      g.messages_and_choices,
      ...g.additional_histories.map((h) => h.messages_and_choices),
    ]);
    expect(Math.max(...histories.map((h) => h.length))).toBeGreaterThan(1);
    const replyTokens = (h: Choice[]) => h[h.length - 1].logprobs.content.length;
    if (new Set(games.map((g) => g.reward)).size === 1)
      expect(row["train/skipped"]).toBeTruthy(); // nothing to learn from
    else expect(row["train/num_tokens_trained"]).toBe(histories.reduce((s, h) => s + replyTokens(h[h.length - 1]), 0));
    await expect(trainCommand([...args, "--max-histories", "-1"])).rejects.toBeInstanceOf(UsageError);
  }, 600_000);

  it("eval prints the base model, the checkpoint and the baselines", async () => {
    const lines: string[] = [];
    const log = console.log;
    console.log = (s: string) => lines.push(String(s));
    try {
      expect(await evalCommand(["--games", "4", "--name", "a", "--runs", runs])).toBe(0);
    } finally {
      console.log = log;
    }
    const table = lines.join("\n");
    for (const row of ["base model", "checkpoint 3", "random legal", "minimax (perfect)"]) expect(table).toContain(row);
  });

  it("eval plays a checkpoint on its run's base model; --model naming another is refused", async () => {
    // A copy of the embedded model in another folder stands for a model the user made.
    const mine = join(runs, "my-model");
    cpSync(join(import.meta.dirname, "../../../../../models/webart-tiny"), mine, { recursive: true });
    expect(await trainCommand(["--steps", "1", "--name", "mine", "--model", mine, ...tiny])).toBe(0);
    const lines: string[] = [];
    const log = console.log;
    console.log = (s: string) => lines.push(String(s));
    try {
      // Without --model, the run's own base model; with it, the same folder by another path is the same model.
      expect(await evalCommand(["--games", "2", "--name", "mine", "--runs", runs, "--no-baselines"])).toBe(0);
      const other = ["--model", relative(process.cwd(), mine), "--no-baselines", "--no-base"];
      expect(await evalCommand(["--games", "2", "--name", "mine", "--runs", runs, ...other])).toBe(0);
    } finally {
      console.log = log;
    }
    expect(lines.join("\n")).toContain("base model (my-model)");
    expect(lines.join("\n")).toContain("checkpoint 1");
    // Run "a" was trained on the embedded webart-tiny: its adapter on another model would be a wrong table.
    const wrong = evalCommand(["--games", "2", "--name", "a", "--runs", runs, "--model", mine]);
    await expect(wrong).rejects.toThrow(/run tictactoe\/a was trained on base model webart-tiny .*Leave --model out/);
  }, 300_000);

  it("--quantize q4: the run records it, resumes and is evaluated on q4 weights; another setting is refused", async () => {
    expect(await trainCommand(["--steps", "1", "--name", "q4", "--quantize", "q4", ...tiny])).toBe(0);
    const dir = join(runs, "tictactoe/models/q4");
    expect(JSON.parse(readFileSync(join(dir, "model.json"), "utf8")).quantize).toBe("q4");
    // Resumed without --quantize, the run would go on against other weights than it trained on.
    const resume = ["--steps", "2", "--name", "q4", "--resume", ...tiny];
    await expect(trainCommand(resume)).rejects.toThrow(/trained on q4 weights, and this backend loads its own weights/);
    expect(await trainCommand([...resume, "--quantize", "q4"])).toBe(0);
    expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("2");
    const lines: string[] = [];
    const log = console.log;
    console.log = (s: string) => lines.push(String(s));
    try {
      // Eval plays it on q4 weights without being told (model.json).
      expect(await evalCommand(["--games", "2", "--name", "q4", "--runs", runs, "--no-baselines"])).toBe(0);
    } finally {
      console.log = log;
    }
    expect(lines.join("\n")).toContain("base model (webart-tiny, q4)");
    expect(lines.join("\n")).toContain("checkpoint 2");
    // A merged export goes into the file's own weights, and says the run trained on q4 ones.
    const merged = await exportMerged({
      runs,
      project: "tictactoe",
      name: "q4",
      out: join(runs, "q4-merged"),
      checkpoint: "latest",
    });
    expect(merged.trainedOn).toBe("q4");
    await expect(trainCommand(["--steps", "1", "--name", "x", "--quantize", "q8", ...tiny])).rejects.toThrow(
      /--quantize "q8": expected q4/,
    );
    // Run "a" was trained on the file's weights: --quantize q4 would play its adapter on other weights.
    const wrong = evalCommand(["--games", "2", "--name", "a", "--runs", runs, "--quantize", "q4"]);
    await expect(wrong).rejects.toThrow(/run tictactoe\/a was trained on the base model's own weights/);
  }, 300_000);

  it("--env email: 2 steps on the embedded webart-tools by default, then eval's table with both scripted searchers", async () => {
    const args = ["--env", "email", "--name", "mail", "--group-size", "2", "--groups-per-step", "1", "--runs", runs];
    args.push("--max-groups", "1");
    // The first step leaves each turn to the model (auto); the env's default is guided calls, as the second's.
    expect(await trainCommand([...args, "--steps", "1", "--max-tokens", "64", "--tool-choice", "auto"])).toBe(0);
    // The second step forces a guided tool call every turn: each sampled turn is a call to one of the tools, its
    // search words the question's. It also trains with unscaled advantages and the token-mean loss, the options'
    // path through to the trainer.
    const unscaled = ["--scale-rewards", "none", "--loss-type", "token"];
    expect(await trainCommand([...args, "--steps", "2", "--resume", "--tool-choice", "guided", ...unscaled])).toBe(0);
    const dir = join(runs, "email/models/mail");
    expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("2");
    type Entry = {
      role?: string;
      message?: { tool_calls?: { function: { name: string; arguments: string } }[] };
      token_ids?: number[];
      token_allowed?: { sets: string[]; of: number[] };
      forced?: boolean;
    };
    type Traj = {
      tools?: { function: { name: string } }[];
      messages_and_choices: Entry[];
      metadata: { question: string };
    };
    const traj = (step: string) =>
      readFileSync(join(dir, `trajectories/train/${step}.jsonl`), "utf8")
        .trim()
        .split("\n")
        .flatMap((l) => (JSON.parse(l) as { trajectories: Traj[] }).trajectories);
    const t = traj("0001");
    expect(t[0].tools?.map((x) => x.function.name)).toEqual(["search_inbox", "read_email", "return_final_answer"]);
    const forced = traj("0002").flatMap((x) =>
      x.messages_and_choices.filter((m) => m.message).map((c) => ({ ...c, question: x.metadata.question })),
    );
    expect(forced.length).toBeGreaterThan(0);
    for (const c of forced) {
      expect(c.message!.tool_calls).toHaveLength(1);
      const call = c.message!.tool_calls![0].function;
      expect(["search_inbox", "read_email", "return_final_answer"]).toContain(call.name);
      const args = JSON.parse(call.arguments) as { keywords?: string[] };
      expect(typeof args).toBe("object");
      for (const k of args.keywords ?? []) expect(c.question).toContain(k);
      // Each sampled token keeps the set the constrained sampler drew it from, which the step trained it over; an
      // explored answer (the default --explore) is forced: one path, no sets.
      if (c.forced) expect(c.token_allowed).toBeUndefined();
      else expect(c.token_allowed!.of).toHaveLength(c.token_ids!.length);
    }
    const out: string[] = [];
    const log = console.log;
    console.log = (s: string) => out.push(String(s));
    try {
      expect(await evalCommand(["--env", "email", "--games", "2", "--name", "mail", "--runs", runs])).toBe(0);
      expect(
        await evalCommand([
          ...["--env", "email", "--games", "2", "--checkpoint", "none", "--no-baselines", "--json"],
          ...["--tool-choice", "required"],
        ]),
      ).toBe(0);
    } finally {
      console.log = log;
    }
    const forcedRows = JSON.parse(out.pop()!) as { malformed: number; wellFormedCalls: number }[];
    expect(forcedRows.map((r) => [r.malformed, r.wellFormedCalls])).toEqual([[0, 1]]);
    const table = out.join("\n");
    for (const row of ["base model (webart-tools)", "checkpoint 2", "perfect searcher", "naive searcher"])
      expect(table).toContain(row);
  }, 600_000);

  it("eval replays: the same --seed gives the same table, another seed another one", async () => {
    const table = async (seed: string) => {
      const lines: string[] = [];
      const log = console.log;
      console.log = (s: string) => lines.push(String(s));
      try {
        expect(
          await evalCommand([
            "--games",
            "8",
            "--checkpoint",
            "none",
            "--seed",
            seed,
            "--temperature",
            "2",
            "--runs",
            runs,
          ]),
        ).toBe(0);
      } finally {
        console.log = log;
      }
      return lines.find((l) => l.startsWith("base model"))!;
    };
    const [a, b, c] = [await table("4242"), await table("4242"), await table("4243")];
    expect(b).toBe(a);
    expect(c).not.toBe(a);
  });
});
