// `webart train --env custom`: your own task, as the web app's custom task runs it. Scenarios from a file (one prompt
// a line, JSONL or CSV with a prompt field), a system prompt, RULER judging each group; held-out scenarios scored
// every few steps, base model against the checkpoint; optionally a supervised warm start on the scenarios' answers.
import { readFileSync } from "node:fs";
import {
  ANSWER_FIELD,
  parseScenarios,
  scenarioFormatOf,
  ScenarioError,
  splitScenarios,
  warmStartConversations,
  type CustomScenario,
  type CustomTask,
  type Message,
} from "@webart/envs";
import { num, UsageError } from "../args.ts";

/** A custom task's defaults where a game's come from its registry entry. */
export const CUSTOM_DEFAULTS = { steps: 20, groupSize: 8, groupsPerStep: 4, maxTokens: 128, validateEvery: 5 };

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

/** Reads and checks a custom task's options; every error names the option or the file's line. */
export function customRun(a: Record<string, string | boolean | undefined>, seed: number): CustomRun {
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
  let split: { train: CustomScenario[]; val: CustomScenario[] };
  try {
    scenarios = parseScenarios(text, scenarioFormatOf(data));
    split = splitScenarios(scenarios, { seed });
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
  const validateEvery = num(
    "validate-every",
    (a["validate-every"] as string | undefined) ?? String(CUSTOM_DEFAULTS.validateEvery),
    {
      int: true,
      min: 1,
    },
  );
  const warmStart = num("warm-start", (a["warm-start"] as string | undefined) ?? "0", { int: true, min: 0 });
  const task: CustomTask = { systemPrompt, turns, ...(userPrompt ? { userPrompt } : {}) };
  const warmConversations = warmStart > 0 ? warmStartConversations(task, split.train) : [];
  if (warmStart > 0 && !warmConversations.length)
    throw new UsageError(
      `--warm-start ${warmStart} trains on the scenarios' "${ANSWER_FIELD}" field, and no training scenario in ` +
        `${data} has one: give JSONL or CSV with an ${ANSWER_FIELD} for some prompts, or leave --warm-start out`,
    );
  const rubric = textOrFile("rubric", a.rubric as string | undefined)?.trim();
  return { task, ...split, ...(rubric ? { rubric } : {}), validateEvery, warmStart, warmConversations };
}
