// `webart train --env custom`: your own task, as the web app's custom task runs it. Scenarios from a file (one prompt
// a line, JSONL or CSV with a prompt field), a system prompt, RULER judging each group; held-out scenarios scored
// every few steps, base model against the checkpoint; optionally a supervised warm start on the scenarios' answers.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import {
  ANSWER_FIELD,
  CUSTOM_DEFAULTS,
  parseScenarios,
  scenarioFormatOf,
  ScenarioError,
  splitScenarios,
  warmStartConversations,
  type CustomScenario,
  type CustomTask,
  type Message,
} from "@webart/envs";
import { checkJudge, JudgeCheckError, type CustomJudge } from "../../custom.ts";
import { num, UsageError, type CommandSpec } from "../args.ts";

/** The judge's options (train's --reward ruler, and a custom task's). */
export const JUDGE_OPTIONS = {
  "judge-base-url": { arg: "URL", help: "RULER: the judge's OpenAI-compatible base URL" },
  "judge-model": { arg: "NAME", help: "RULER: the judge's model name" },
  "judge-api-key-env": {
    arg: "VAR",
    default: "OPENAI_API_KEY",
    help: "RULER: environment variable holding the judge's API key",
  },
  "judge-temperature": {
    arg: "T",
    help: "RULER: the judge's sampling temperature (default: the provider's); 0 for scores that repeat",
  },
  "judge-seed": { arg: "N", help: "RULER: a seed sent with each judge request, for providers that honour one" },
} satisfies CommandSpec["options"];

/** A custom task's options (train's and eval's). */
export const TASK_OPTIONS = {
  data: {
    arg: "FILE",
    help: "custom: the scenarios, one prompt a line, or JSONL / CSV with a prompt field (other fields, such as\nan answer, go to the judge only); train holds a fifth (at least one) out for validation, eval scores all",
  },
  "system-prompt": {
    arg: "TEXT|@FILE",
    help: "custom: the system prompt, what the task is (the judge reads it too)",
  },
  rubric: { arg: "TEXT|@FILE", help: "custom: what a good conversation is, for the judge (default: RULER's rubric)" },
  turns: { arg: "N", help: "custom: assistant turns a conversation, a simulated user between them (default 1)" },
  "user-prompt": {
    arg: "TEXT|@FILE",
    help: "custom, --turns above 1: how the simulated user (the same model) behaves",
  },
} satisfies CommandSpec["options"];

/** The judge the options name; `why` is the option that needs one. */
export function judgeOf(
  a: Record<string, string | boolean | undefined>,
  why: string,
): { client: OpenAI; model: string; requestParams?: Record<string, unknown> } {
  const url = a["judge-base-url"];
  const model = a["judge-model"];
  if (typeof url !== "string" || typeof model !== "string")
    throw new UsageError(`${why} needs --judge-base-url and --judge-model`);
  const key = process.env[String(a["judge-api-key-env"])] ?? "none";
  const requestParams: Record<string, number> = {};
  const t = a["judge-temperature"];
  if (typeof t === "string") requestParams.temperature = num("judge-temperature", t, { min: 0, max: 2 });
  const seed = a["judge-seed"];
  if (typeof seed === "string") requestParams.seed = num("judge-seed", seed, { int: true, min: 0 });
  return {
    client: new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0 }),
    model,
    ...(Object.keys(requestParams).length ? { requestParams } : {}),
  };
}

/** Asks the judge once, as RULER will: a JudgeCheckError names a judge that cannot be used, and why. */
export async function checkJudgeOption(judge: CustomJudge): Promise<void> {
  try {
    await checkJudge(judge, { timeoutMs: 60_000 });
  } catch (e) {
    // Not a browser here: a page's CORS is no cause.
    if (e instanceof JudgeCheckError)
      throw new JudgeCheckError(e.message.replace(/ and that it accepts.*CORS\)\./, "."));
    throw e;
  }
}

/** The options only a custom task takes, and the game options it does not. */
export const CUSTOM_ONLY = ["data", "system-prompt", "rubric", "turns", "user-prompt", "validate-every", "warm-start"];
export const GAME_ONLY = [
  "opponent",
  "start",
  "decision-reward",
  "explore",
  "legal-moves",
  "tool-choice",
  "max-groups",
];

export interface CustomRun {
  task: CustomTask;
  /** The scenarios trained on, and the held-out ones validation scores (a fifth, at least one; seeded). */
  train: CustomScenario[];
  val: CustomScenario[];
  rubric?: string;
  validateEvery: number;
  /** Supervised epochs on the training scenarios' answers before the first GRPO step, a step each. */
  warmStart: number;
  warmConversations: Message[][];
  data: string;
  dataHash: string;
}

/** A text option's value, or a file's contents when it starts with @. */
function textOrFile(flag: string, v: string | undefined): string | undefined {
  if (v === undefined || !v.startsWith("@")) return v;
  const path = v.slice(1);
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new UsageError(`--${flag} ${v}: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? e})`);
  }
}

/** A custom task as its options give it: the task, every scenario of --data, the rubric. */
export interface CustomTaskOptions {
  task: CustomTask;
  scenarios: CustomScenario[];
  rubric?: string;
  data: string;
  /** sha256 of the scenarios as read (the split and the steps' scenarios follow from them and the seed). */
  dataHash: string;
}

/** Reads and checks the task's options (train's and eval's); every error names the option or the file's line. */
export function customTaskOptions(a: Record<string, string | boolean | undefined>): CustomTaskOptions {
  const data = a.data as string | undefined;
  if (!data)
    throw new UsageError("--env custom needs --data FILE: one prompt a line, or JSONL or CSV with a prompt field");
  let text: string;
  try {
    text = readFileSync(data, "utf8");
  } catch (e) {
    throw new UsageError(`--data ${data}: cannot read it (${(e as NodeJS.ErrnoException).code ?? e})`);
  }
  let scenarios: CustomScenario[];
  try {
    scenarios = parseScenarios(text, scenarioFormatOf(data));
  } catch (e) {
    if (e instanceof ScenarioError) throw new UsageError(`--data ${data}: ${e.message}`);
    throw e;
  }
  const systemPrompt = textOrFile("system-prompt", a["system-prompt"] as string | undefined)?.trim();
  if (!systemPrompt)
    throw new UsageError(
      "--env custom needs --system-prompt TEXT (or @FILE): what the task is; the judge reads it too",
    );
  const turns = num("turns", (a.turns as string | undefined) ?? "1", { int: true, min: 1, max: 8 });
  const userPrompt = textOrFile("user-prompt", a["user-prompt"] as string | undefined)?.trim();
  if (turns > 1 && !userPrompt)
    throw new UsageError(`--turns ${turns} needs --user-prompt TEXT (or @FILE): how the simulated user behaves`);
  const task: CustomTask = { systemPrompt, turns, ...(userPrompt ? { userPrompt } : {}) };
  const rubric = textOrFile("rubric", a.rubric as string | undefined)?.trim();
  const dataHash = createHash("sha256").update(JSON.stringify(scenarios)).digest("hex");
  return { task, scenarios, ...(rubric ? { rubric } : {}), data, dataHash };
}

/** Train's custom task: the options above, the seeded split, validation's interval and the warm start. */
export function customRun(a: Record<string, string | boolean | undefined>, seed: number): CustomRun {
  const { task, scenarios, rubric, data, dataHash } = customTaskOptions(a);
  let split: { train: CustomScenario[]; val: CustomScenario[] };
  try {
    split = splitScenarios(scenarios, { seed });
  } catch (e) {
    if (e instanceof ScenarioError) throw new UsageError(`--data ${data}: ${e.message}`);
    throw e;
  }
  const validateEvery = num(
    "validate-every",
    (a["validate-every"] as string | undefined) ?? String(CUSTOM_DEFAULTS.validateEvery),
    {
      int: true,
      min: 1,
    },
  );
  const warmStart = num("warm-start", (a["warm-start"] as string | undefined) ?? "0", { int: true, min: 0 });
  const warmConversations = warmStart > 0 ? warmStartConversations(task, split.train) : [];
  if (warmStart > 0 && !warmConversations.length)
    throw new UsageError(
      `--warm-start ${warmStart} trains on the scenarios' "${ANSWER_FIELD}" field, and no training scenario in ` +
        `${data} has one: give JSONL or CSV with an ${ANSWER_FIELD} for some prompts, or leave --warm-start out`,
    );
  return { task, ...split, ...(rubric ? { rubric } : {}), validateEvery, warmStart, warmConversations, data, dataHash };
}

/**
 * The task a run was trained on, kept in its folder (custom.json) when it starts; a resumed run told another task
 * (other scenarios, system prompt, turns, user prompt or rubric) is named the differences, since its held-out split
 * and its steps' scenarios follow from them.
 */
export function keepCustomTask(runDir: string, run: CustomRun, resumed: boolean): string[] {
  const file = join(runDir, "custom.json");
  const now = { data: run.data, dataHash: run.dataHash, ...run.task, rubric: run.rubric ?? "" };
  if (!resumed || !existsSync(file)) {
    writeFileSync(file, JSON.stringify(now, null, 2) + "\n");
    return [];
  }
  const was = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
  const fields: [keyof typeof now, string][] = [
    ["dataHash", `the scenarios (${String(was.data)} then, ${run.data} now)`],
    ["systemPrompt", "the system prompt"],
    ["turns", "the turns"],
    ["userPrompt", "the user prompt"],
    ["rubric", "the rubric"],
  ];
  return fields.filter(([k]) => (was[k] ?? "") !== (now[k] ?? "")).map(([, what]) => what);
}
