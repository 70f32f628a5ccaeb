// A task of your own, scored by a RULER judge: a system prompt and scenarios (a prompt each, plus fields only the
// judge sees) read from lines, JSONL or CSV; the split into training and validation scenarios; the scenarios of a
// training step; and one rollout, single-turn or multi-turn with a simulated user. The simulated user is the same
// model behind the same client, prompted with the user-simulator prompt: no second endpoint to set up.
import type OpenAI from "openai";
import { Rng } from "@webart/gpu";
import { turnSeed } from "./rollout.ts";
import { isChoice, type Message, type MessagesAndChoices, type SamplingOptions, type TrajectoryLike } from "./types.ts";

export interface CustomScenario {
  /** The user's first message. */
  prompt: string;
  /** The scenario's other fields (a reference answer, a note on what matters): shown to the judge, not the model. */
  fields?: Record<string, string>;
}

export type ScenarioFormat = "lines" | "jsonl" | "csv";

export interface CustomTask {
  systemPrompt: string;
  /** Assistant turns per conversation: 1 is single-turn. */
  turns: number;
  /** How the simulated user behaves between assistant turns (multi-turn only). */
  userPrompt?: string;
}

/** A custom task's defaults, in the tab and in `webart train --env custom`: a reply in words takes more tokens than a
 *  game's move. */
export const CUSTOM_DEFAULTS = { steps: 20, groupSize: 8, groupsPerStep: 4, maxTokens: 128, validateEvery: 5 } as const;

/** Scenarios that cannot be read; the message says where and what to do. */
export class ScenarioError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ScenarioError";
  }
}

const EMPTY =
  "The scenario list is empty: type one prompt per line, or upload a JSONL or CSV file with a prompt field.";

/** The format a file's name says: .jsonl/.ndjson, .csv, anything else one prompt per line. */
export function scenarioFormatOf(fileName: string): ScenarioFormat {
  if (/\.(jsonl|ndjson)$/i.test(fileName)) return "jsonl";
  if (/\.csv$/i.test(fileName)) return "csv";
  return "lines";
}

const fieldText = (v: unknown) => (typeof v === "string" ? v : JSON.stringify(v));

/** Scenarios from text; throws ScenarioError naming the line (JSONL) or row (CSV) that is wrong. */
export function parseScenarios(text: string, format: ScenarioFormat): CustomScenario[] {
  const out = format === "jsonl" ? parseJsonl(text) : format === "csv" ? parseCsvScenarios(text) : parseLines(text);
  if (out.length === 0) throw new ScenarioError(EMPTY);
  return out;
}

function parseLines(text: string): CustomScenario[] {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l)
    .map((prompt) => ({ prompt }));
}

function parseJsonl(text: string): CustomScenario[] {
  const out: CustomScenario[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch (e) {
      throw new ScenarioError(`JSONL line ${i + 1}: not valid JSON (${(e as Error).message})`);
    }
    if (v === null || typeof v !== "object" || Array.isArray(v))
      throw new ScenarioError(`JSONL line ${i + 1}: expected a JSON object like {"prompt": "..."}`);
    const { prompt, ...rest } = v as Record<string, unknown>;
    if (typeof prompt !== "string" || !prompt.trim())
      throw new ScenarioError(`JSONL line ${i + 1}: no "prompt" field (a non-empty string)`);
    const fields = Object.fromEntries(Object.entries(rest).map(([k, x]) => [k, fieldText(x)]));
    out.push(Object.keys(fields).length ? { prompt, fields } : { prompt });
  });
  return out;
}

/** RFC 4180 CSV: quoted fields may hold commas, newlines and doubled quotes. Rows with their 1-based line. */
export function parseCsv(text: string): { line: number; cells: string[] }[] {
  const rows: { line: number; cells: string[] }[] = [];
  let cells: string[] = [];
  let cell = "";
  let quoted = false;
  let line = 1;
  let rowLine = 1;
  const endRow = () => {
    cells.push(cell);
    if (cells.length > 1 || cells[0].trim()) rows.push({ line: rowLine, cells });
    cells = [];
    cell = "";
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else {
        if (c === "\n") line++;
        cell += c;
      }
    } else if (c === '"' && cell === "") quoted = true;
    else if (c === ",") {
      cells.push(cell);
      cell = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      endRow();
      rowLine = ++line;
    } else cell += c;
  }
  if (quoted) throw new ScenarioError(`CSV line ${rowLine}: a quoted field is never closed`);
  if (cell || cells.length) endRow();
  return rows;
}

function parseCsvScenarios(text: string): CustomScenario[] {
  const rows = parseCsv(text.replace(/^\uFEFF/, ""));
  if (rows.length === 0) return [];
  const header = rows[0].cells.map((h) => h.trim());
  const p = header.findIndex((h) => h.toLowerCase() === "prompt");
  if (p < 0)
    throw new ScenarioError(
      `The CSV has no "prompt" column (its header row has: ${header.map((h) => JSON.stringify(h)).join(", ")}). ` +
        `Name the column holding the prompts "prompt".`,
    );
  return rows.slice(1).map(({ line, cells }) => {
    const prompt = cells[p]?.trim() ?? "";
    if (!prompt) throw new ScenarioError(`CSV line ${line}: the prompt is empty`);
    const fields: Record<string, string> = {};
    header.forEach((h, i) => {
      if (i !== p && h && cells[i] !== undefined && cells[i] !== "") fields[h] = cells[i];
    });
    return Object.keys(fields).length ? { prompt, fields } : { prompt };
  });
}

/**
 * Splits scenarios (in a seeded shuffle) into training and validation: `fraction` of them, at least one, go to
 * validation; at least one stays for training.
 */
export function splitScenarios(
  scenarios: readonly CustomScenario[],
  opts: { seed: number; fraction?: number },
): { train: CustomScenario[]; val: CustomScenario[] } {
  const fraction = opts.fraction ?? 0.2;
  if (scenarios.length < 2)
    throw new ScenarioError(
      `${scenarios.length} scenario${scenarios.length === 1 ? "" : "s"}: give at least 2, one to train on and one to validate with`,
    );
  const nVal = Math.min(scenarios.length - 1, Math.max(1, Math.round(scenarios.length * fraction)));
  const order = scenarios.map((_, i) => i);
  const rng = new Rng(opts.seed);
  for (let i = order.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  return {
    val: order.slice(0, nVal).map((i) => scenarios[i]),
    train: order.slice(nVal).map((i) => scenarios[i]),
  };
}

/** The training scenarios of step `step` (0-based), one per group, taken in turn through the list. */
export function customStepScenarios(
  step: number,
  train: readonly CustomScenario[],
  groupsPerStep: number,
): CustomScenario[] {
  return Array.from({ length: groupsPerStep }, (_, g) => train[(step * groupsPerStep + g) % train.length]);
}

/** The scenario field that holds a reference reply: a supervised warm start trains on it (the judge sees it too). */
export const ANSWER_FIELD = "answer";

/**
 * The conversations a supervised warm start trains on: the system prompt, each scenario's prompt, and its
 * `answer` field as the assistant's reply. Scenarios without one are left out.
 */
export function warmStartConversations(
  task: Pick<CustomTask, "systemPrompt">,
  scenarios: readonly CustomScenario[],
): Message[][] {
  return scenarios.flatMap((s) => {
    const answer = s.fields?.[ANSWER_FIELD];
    if (answer === undefined || !answer.trim()) return [];
    const system: Message[] = task.systemPrompt.trim() ? [{ role: "system", content: task.systemPrompt }] : [];
    return [[...system, { role: "user", content: s.prompt }, { role: "assistant", content: answer }]];
  });
}

/** What the judge is told about a scenario beyond the conversation: its extra fields. */
export function scenarioNotes(s: CustomScenario): string {
  const f = Object.entries(s.fields ?? {});
  if (!f.length) return "";
  return `Notes on this scenario, for grading only (the agent did not see them):\n${f.map(([k, v]) => `- ${k}: ${v}`).join("\n")}`;
}

const asMessage = (m: MessagesAndChoices[number]): Message =>
  isChoice(m) ? { role: "assistant", content: m.message.content ?? "" } : m;

/** The simulated user's view: the conversation with the roles swapped, after its own instructions. */
function userView(task: CustomTask, scenario: CustomScenario, convo: Message[]): Message[] {
  const swapped = convo
    .filter((m) => m.role === "user" || m.role === "assistant")
    .map((m): Message => ({ role: m.role === "user" ? "assistant" : "user", content: String(m.content ?? "") }));
  const system =
    `${task.userPrompt?.trim() || "You are the user talking to an AI assistant. Reply as that user would, briefly."}\n\n` +
    `You opened the conversation with: ${JSON.stringify(scenario.prompt)}`;
  return [{ role: "system", content: system }, ...swapped];
}

/**
 * One conversation: the system prompt, the scenario's prompt, and `task.turns` assistant replies, with the
 * simulated user's message between them. The reward is left at 0 for the judge to set.
 */
export async function rolloutCustom(
  client: OpenAI,
  opts: SamplingOptions & { task: CustomTask; scenario: CustomScenario },
): Promise<TrajectoryLike> {
  const { task, scenario, model, temperature, maxTokens, seed } = opts;
  let k = 0; // a seed per request (the simulated user's too), as a game's turns take theirs
  const convo: MessagesAndChoices = [
    { role: "system", content: task.systemPrompt },
    { role: "user", content: scenario.prompt },
  ];
  const ask = async (messages: Message[]) => {
    const r = await client.chat.completions.create({
      model,
      messages,
      temperature,
      max_completion_tokens: maxTokens,
      logprobs: true,
      ...(seed === undefined ? {} : { seed: turnSeed(seed, k++) }),
    });
    const choice = r.choices[0];
    if (!choice) throw new Error(`chat completion from model "${model}" has no choices`);
    return choice;
  };
  const turns = Math.max(1, task.turns);
  for (let t = 0; t < turns; t++) {
    convo.push(await ask(convo.map(asMessage)));
    if (t + 1 < turns) {
      const u = await ask(userView(task, scenario, convo.map(asMessage)));
      convo.push({ role: "user", content: u.message.content ?? "" });
    }
  }
  return {
    messagesAndChoices: convo,
    reward: 0,
    metrics: { turns },
    metadata: {
      task: "custom",
      prompt: scenario.prompt,
      ...(scenario.fields ? { notes: scenarioNotes(scenario) } : {}),
    },
    logs: [],
  };
}
