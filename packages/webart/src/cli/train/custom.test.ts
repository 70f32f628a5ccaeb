// `webart train --env custom`: your own task from a file, judged by RULER over HTTP on 127.0.0.1 (a scripted judge),
// with a supervised warm start and validation of the base model against the checkpoint; its usage errors.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requestedIds, startJudge, type ScriptedJudge } from "@webart/ruler/testing";
import { evalCommand } from "./eval.ts";
import { trainCommand } from "./train.ts";

const runs = mkdtempSync(join(tmpdir(), "webart-custom-"));
const data = join(runs, "scenarios.jsonl");
// Six scenarios: one (at least) is held out for validation; the others train, two with a reference answer.
writeFileSync(
  data,
  [
    { prompt: "Name a colour.", answer: "blue" },
    { prompt: "Name an animal.", answer: "cat" },
    { prompt: "Name a fruit." },
    { prompt: "Name a city." },
    { prompt: "Name a river." },
    { prompt: "Name a tree." },
  ]
    .map((s) => JSON.stringify(s))
    .join("\n"),
);
let judge: ScriptedJudge;
beforeAll(async () => {
  // The judge scores trajectory "1" high and the rest low: a group whose conversations differ has something to learn.
  judge = await startJudge((req) => ({
    content: JSON.stringify({
      scores: requestedIds(req).map((id) => ({
        trajectory_id: id,
        explanation: `judged ${id}`,
        score: id === "1" ? 0.9 : 0.2,
      })),
    }),
  }));
});
afterAll(() => judge?.close());

const read = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe("webart train --env custom", () => {
  it("a warm start, GRPO steps judged by RULER, and validation of the base model against the checkpoint", async () => {
    const args = [
      "--env",
      "custom",
      "--data",
      data,
      "--system-prompt",
      "Answer with one word.",
      "--rubric",
      "One word that answers the question is best.",
      "--warm-start",
      "1",
      "--steps",
      "3",
      "--validate-every",
      "2",
      "--judge-base-url",
      judge.baseURL,
      "--judge-model",
      "judge",
      "--group-size",
      "3",
      "--groups-per-step",
      "2",
      "--max-tokens",
      "8",
      // The embedded model knows only tic-tac-toe; hot sampling keeps a group's replies apart, so RULER sees each.
      "--temperature",
      "2",
      "--runs",
      runs,
      "--name",
      "mine",
    ];
    expect(await trainCommand(args)).toBe(0);
    const dir = join(runs, "custom/models/mine");
    // Step 1 supervised, steps 2 and 3 GRPO; a checkpoint each.
    for (const s of ["0001", "0002", "0003"])
      expect(existsSync(join(dir, "checkpoints", s, "adapter_model.safetensors"))).toBe(true);
    const hist = read(join(dir, "history.jsonl"));
    // Step 1 supervised; steps 2 and 3 GRPO, each validated (step 2: every 2; step 3: the last) in a row of its own.
    expect(hist.map((h) => h.step)).toEqual([1, 2, 2, 3, 3]);
    expect(hist[0]["train/sft_num_trajectories"]).toBe(2); // the two training scenarios with an answer
    expect(hist[1]["train/num_groups_submitted"]).toBe(2);
    const val = hist.filter((h) => "val/base_score" in h);
    expect(val.map((h) => h.step)).toEqual([2, 3]);
    const scores = read(join(dir, "scores.jsonl"));
    for (const [i, step] of [2, 3].entries()) {
      // Each held-out scenario is one group: the base model's conversation, then the checkpoint's, judged together.
      const groups = read(join(dir, `trajectories/val/000${step}.jsonl`)) as {
        trajectories: { reward: number; metadata: { policy: string } }[];
      }[];
      expect(groups.length).toBeGreaterThanOrEqual(1);
      for (const g of groups) expect(g.trajectories.map((t) => t.metadata.policy)).toEqual(["base", "checkpoint"]);
      const mean = (k: number) => groups.reduce((a, g) => a + g.trajectories[k].reward, 0) / groups.length;
      expect(val[i]["val/base_score"]).toBeCloseTo(mean(0), 6);
      expect(val[i]["val/checkpoint_score"]).toBeCloseTo(mean(1), 6);
      // The chart's points are the same scores.
      expect(scores[i]).toMatchObject({ step, score: val[i]["val/checkpoint_score"], base: val[i]["val/base_score"] });
    }
    expect(scores).toHaveLength(2);
    // The judge was checked once, then saw every group with the task's rubric.
    expect(judge.requests.length).toBeGreaterThanOrEqual(3);
    const prompts = judge.requests.slice(1).map((r) => r.body.messages.map((m) => m.content).join("\n"));
    for (const p of prompts) expect(p).toContain("One word that answers the question is best.");
    const chart = readFileSync(join(dir, "chart.svg"), "utf8");
    expect(chart).toContain("validation: checkpoint");
    expect(chart).toContain("validation: base model");
  }, 300_000);

  it("eval --env custom: the checkpoint and its base model answer every scenario, each pair judged side by side", async () => {
    const out = join(runs, "eval.jsonl");
    const lines: string[] = [];
    const log = console.log;
    console.log = (s: string) => lines.push(String(s));
    try {
      const args = ["--env", "custom", "--data", data, "--system-prompt", "Answer with one word.", "--name", "mine"];
      const judging = ["--judge-base-url", judge.baseURL, "--judge-model", "judge"];
      const repeatable = ["--judge-temperature", "0", "--judge-seed", "5"];
      const sampling = ["--max-tokens", "8", "--temperature", "2", "--runs", runs, "--trajectories", out, "--json"];
      const asked = judge.requests.length;
      expect(await evalCommand([...args, ...judging, ...repeatable, ...sampling])).toBe(0);
      // Every request to the judge, its check before loading included, carries the sampling asked for.
      const sent = judge.requests.slice(asked).map((r) => [r.body.temperature, r.body.seed]);
      expect(sent.length).toBeGreaterThanOrEqual(2);
      expect(sent.every(([t, seed]) => t === 0 && seed === 5)).toBe(true);
    } finally {
      console.log = log;
    }
    type Row = { player: string; scenarios: number; meanScore: number; preferred: number; tied: number };
    const rows = JSON.parse(lines[lines.length - 1]) as Row[];
    expect(rows.map((r) => r.player)).toEqual(["base model (webart-tiny)", "checkpoint 3"]);
    // Every scenario of the file, not only training's held-out one.
    expect(rows.map((r) => r.scenarios)).toEqual([6, 6]);
    const played = read(out) as { player: string; trajectory: { reward: number } }[];
    expect(played).toHaveLength(12);
    for (const [k, r] of rows.entries()) {
      const mine = played.filter((p, i) => i % 2 === k).map((p) => p.trajectory.reward);
      expect(played.filter((_, i) => i % 2 === k).every((p) => p.player === r.player)).toBe(true);
      expect(r.meanScore).toBeCloseTo(mine.reduce((a, b) => a + b, 0) / 6, 6);
    }
    expect(rows[0].tied).toBe(rows[1].tied);
    expect(rows[0].preferred + rows[1].preferred + rows[0].tied).toBeCloseTo(1, 9);
    // --seed replays the samples (scenario i drawn with seed + i, the same for both models); another seed draws anew.
    const replies = async (seed: string) => {
      const file = join(runs, `eval-${seed}.jsonl`);
      const args = ["--env", "custom", "--data", data, "--system-prompt", "Answer with one word.", "--name", "mine"];
      const more = ["--judge-base-url", judge.baseURL, "--judge-model", "judge", "--max-tokens", "8"];
      const log = console.log;
      console.log = () => {};
      try {
        await evalCommand([
          ...args,
          ...more,
          "--temperature",
          "2",
          "--runs",
          runs,
          "--trajectories",
          file,
          "--seed",
          seed,
        ]);
      } finally {
        console.log = log;
      }
      return (read(file) as { trajectory: { messages_and_choices: { message?: { content: string } }[] } }[]).map((p) =>
        p.trajectory.messages_and_choices.map((m) => m.message?.content ?? "").join("|"),
      );
    };
    const first = await replies("7");
    expect(await replies("7")).toEqual(first);
    expect(await replies("8")).not.toEqual(first);
    const base = ["--env", "custom", "--data", data, "--system-prompt", "x", "--runs", runs];
    const judging = ["--judge-base-url", judge.baseURL, "--judge-model", "judge"];
    await expect(evalCommand([...base, ...judging, "--checkpoint", "none"])).rejects.toThrow(/leaves no pair/);
    await expect(evalCommand([...base, ...judging, "--games", "4"])).rejects.toThrow(/--games is not for --env custom/);
    await expect(evalCommand([...base, ...judging, "--name", "nobody"])).rejects.toThrow(/no run custom\/nobody/);
    await expect(evalCommand([...base, "--name", "mine"])).rejects.toThrow(/needs --judge-base-url and --judge-model/);
    await expect(evalCommand([...base, ...judging, "--name", "mine", "--judge-temperature", "hot"])).rejects.toThrow(
      /^--judge-temperature "hot": expected a number in \[0, 2\]$/,
    );
  }, 300_000);

  it("a judge that fails mid-run stops it at its last checkpoint, naming the judge's error; --resume goes on", async () => {
    // Answers the check and step 1's group, then 503s (step 2's group gets no score in 3 attempts) until healthy.
    let healthy = false;
    const flaky = await startJudge((req, i) =>
      !healthy && i >= 2
        ? { status: 503, body: { error: { message: "judge overloaded" } } }
        : {
            content: JSON.stringify({
              scores: requestedIds(req).map((id) => ({ trajectory_id: id, explanation: id, score: Number(id) / 10 })),
            }),
          },
    );
    const args = (steps: string, url: string) => [
      "--env",
      "custom",
      "--data",
      data,
      "--system-prompt",
      "Answer with one word.",
      "--steps",
      steps,
      "--validate-every",
      "100",
      "--groups-per-step",
      "1",
      "--group-size",
      "2",
      "--max-tokens",
      "8",
      "--temperature",
      "2",
      "--judge-base-url",
      url,
      "--judge-model",
      "judge",
      "--runs",
      runs,
      "--name",
      "flaky",
    ];
    const dir = join(runs, "custom/models/flaky");
    try {
      await expect(trainCommand(args("2", flaky.baseURL))).rejects.toThrow(
        /ruler: judge judge at .* gave no usable answer in 3 attempts.*503.*judge overloaded/,
      );
      expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("1");
      expect(existsSync(join(dir, "checkpoints/0002"))).toBe(false);
      expect(read(join(dir, "history.jsonl")).map((h) => h.step)).toEqual([1]);
      expect(flaky.requests.length).toBe(2 + 3);
      healthy = true;
      expect(await trainCommand([...args("2", flaky.baseURL), "--resume"])).toBe(0);
      expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("2");
    } finally {
      await flaky.close();
    }
  }, 300_000);

  it("--turns 2: each conversation has two replies with the simulated user's message between them", async () => {
    const args = ["--env", "custom", "--data", data, "--system-prompt", "Answer with one word.", "--turns", "2"];
    const user = ["--user-prompt", "@" + join(runs, "user.txt")];
    writeFileSync(join(runs, "user.txt"), "You are curious; ask a short follow-up question.");
    const judging = ["--judge-base-url", judge.baseURL, "--judge-model", "judge", "--validate-every", "100"];
    const small = [
      "--groups-per-step",
      "1",
      "--group-size",
      "2",
      "--max-tokens",
      "6",
      "--runs",
      runs,
      "--name",
      "talk",
    ];
    expect(await trainCommand([...args, ...user, ...judging, ...small, "--steps", "1"])).toBe(0);
    const [group] = read(join(runs, "custom/models/talk/trajectories/train/0001.jsonl")) as {
      trajectories: { messages_and_choices: { role?: string; message?: unknown }[] }[];
    }[];
    for (const t of group.trajectories)
      expect(t.messages_and_choices.map((m) => m.role ?? (m.message ? "choice" : "?"))).toEqual([
        "system",
        "user",
        "choice",
        "user",
        "choice",
      ]);
    // The run keeps its task; resumed with another system prompt, it says so (and goes on with the new one).
    const kept = JSON.parse(readFileSync(join(runs, "custom/models/talk/custom.json"), "utf8")) as Record<
      string,
      unknown
    >;
    expect(kept).toMatchObject({ data, systemPrompt: "Answer with one word.", turns: 2 });
    const notes: string[] = [];
    const error = console.error;
    console.error = (m: string) => notes.push(String(m));
    try {
      const other = ["--env", "custom", "--data", data, "--system-prompt", "Answer briefly.", "--turns", "2"];
      const resume = [...user, ...judging, ...small, "--steps", "2", "--resume"];
      expect(await trainCommand([...other, ...resume])).toBe(0);
    } finally {
      console.error = error;
    }
    expect(notes.join("\n")).toMatch(/was trained until step 1 on another task: the system prompt changed/);
  }, 180_000);

  it("refuses what it cannot run, naming the option or the file", async () => {
    const base = ["--env", "custom", "--runs", runs, "--judge-base-url", judge.baseURL, "--judge-model", "judge"];
    const prompt = ["--system-prompt", "Answer with one word."];
    await expect(trainCommand([...base, ...prompt])).rejects.toThrow(/--env custom needs --data FILE/);
    await expect(trainCommand([...base, ...prompt, "--data", join(runs, "none.jsonl")])).rejects.toThrow(
      /--data .*none\.jsonl: cannot read it \(ENOENT\)/,
    );
    const bad = join(runs, "bad.jsonl");
    writeFileSync(bad, '{"prompt": "a"}\n{"prompt": \n');
    await expect(trainCommand([...base, ...prompt, "--data", bad])).rejects.toThrow(/bad\.jsonl: .*line 2/);
    await expect(trainCommand([...base, "--data", data])).rejects.toThrow(/needs --system-prompt/);
    await expect(trainCommand([...base, ...prompt, "--data", data, "--opponent", "random"])).rejects.toThrow(
      /--opponent is not for --env custom/,
    );
    await expect(trainCommand(["--data", data])).rejects.toThrow(/--data is not for --env tictactoe/);
    await expect(trainCommand([...base, ...prompt, "--data", data, "--reward", "env"])).rejects.toThrow(
      /judged by RULER/,
    );
    await expect(trainCommand([...base, ...prompt, "--data", data, "--turns", "2"])).rejects.toThrow(
      /--turns 2 needs --user-prompt/,
    );
    const plain = join(runs, "plain.txt");
    writeFileSync(plain, "Name a colour.\nName an animal.\n");
    await expect(trainCommand([...base, ...prompt, "--data", plain, "--warm-start", "2"])).rejects.toThrow(
      /no training scenario in .*plain\.txt has one/,
    );
    const prose = await startJudge(() => ({ content: "I think the first one is better." }));
    try {
      const args = [...base, ...prompt, "--data", data, "--judge-base-url", prose.baseURL, "--name", "prose"];
      await expect(trainCommand(args)).rejects.toThrow(/not in RULER's JSON schema/);
    } finally {
      await prose.close();
    }
    expect(existsSync(join(runs, "custom/models/prose"))).toBe(false);
  }, 120_000);
});
