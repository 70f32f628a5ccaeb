// The training form's fields as typed text, their defaults, and validation into TrainSettings with one
// message per field (shown next to it).
import {
  GAMES,
  parseOpponents,
  parseScenarios,
  splitScenarios,
  TICTACTOE_OPPONENTS,
  TICTACTOE_STARTS,
  parseStarts,
  warmStartConversations,
  ANSWER_FIELD,
  CUSTOM_DEFAULTS,
  type CustomScenario,
  type ScenarioFormat,
} from "webart/envs";
import type { EnvName, TrainSettings } from "../api.ts";

export interface SettingsDraft {
  name: string;
  env: EnvName;
  /** "self": RULER with the loaded model as its own judge (custom task). */
  reward: "env" | "ruler" | "self";
  /** Custom task: the system prompt, the scenarios as text (typed, or an uploaded file's) and their format. */
  systemPrompt: string;
  scenarioText: string;
  scenarioFormat: ScenarioFormat;
  /** The uploaded file the scenarios came from, if any. */
  scenarioFile: string;
  rubric: string;
  turns: string;
  userPrompt: string;
  valEvery: string;
  /** Custom task: supervised passes over the scenarios' answers before GRPO (0: none). */
  warmStart: string;
  rulerBaseURL: string;
  rulerModel: string;
  rulerApiKey: string;
  rememberKey: boolean;
  steps: string;
  groupSize: string;
  groupsPerStep: string;
  /** Dynamic sampling: groups drawn a step at most, more while fewer than groupsPerStep have rewards that differ
   *  (empty: groupsPerStep, none more). */
  maxGroups: string;
  learningRate: string;
  /** KL penalty toward the base model. */
  beta: string;
  loraRank: string;
  seed: string;
  maxTokens: string;
  temperature: string;
  /** Tic-tac-toe opponents, one per group in turn, comma-separated (e.g. "random,winning"). */
  opponents: string;
  /** Where tic-tac-toe games start, one per group in turn, comma-separated (e.g. "empty,decision"). */
  starts: string;
  /** Tic-tac-toe's reward for the decisions themselves (0: the outcome alone). */
  decisionReward: string;
  /** Tic-tac-toe's exploration: the chance a training move is a random empty cell, forced (0: none). */
  explore: string;
  /** Tic-tac-toe: each training move sampled among the legal ones (guided_choice of the empty cells). */
  legalMoves: boolean;
  /** Email: "required" forces a tool call every turn (constrained to a tool's schema), "guided" also limits its
   *  values to what the episode has shown; "auto" leaves it to the model. */
  toolChoice: "auto" | "required" | "guided";
  /** GiB of GPU memory the run may plan for. */
  memoryBudget: string;
  /** The base model's weights as 4-bit ones (q4). */
  q4: boolean;
}

export type DraftErrors = Partial<Record<keyof SettingsDraft, string>>;

export const KEY_STORAGE = "webart.rulerApiKey";

/** The engine's default memory budget in a browser (defaultMemoryBudget), in GiB: WebGPU does not say how much
 *  memory a GPU has, and 4 GiB is what integrated GPUs and a tab commonly allow. */
export const DEFAULT_BUDGET_GIB = 4;

/** How the run list names each environment. */
export const ENV_LABELS: Record<EnvName, string> = {
  tictactoe: "tic-tac-toe",
  "2048": "2048",
  email: "email search",
  custom: "custom task",
};

/** The form's reply budget for an env, as text: the game registry's tokens per turn (a move is a few tokens, a tool
 *  call a hundred or more); a custom task's reply in words, CUSTOM_DEFAULTS' (as `webart train --env custom`). */
export const defaultMaxTokens = (env: EnvName): string =>
  String(env === "custom" ? CUSTOM_DEFAULTS.maxTokens : GAMES[env].maxTokens);

/** The settings an env's `npm run train` defaults set (the email env's guided calls at temperature 1.5, ...). */
function envDefaults(
  env: EnvName,
): Pick<
  SettingsDraft,
  "steps" | "groupSize" | "groupsPerStep" | "maxGroups" | "temperature" | "toolChoice" | "maxTokens" | "explore"
> {
  // A custom task: CUSTOM_DEFAULTS' steps and groups, tic-tac-toe's sampling (temperature 1, no tools).
  const t = GAMES[env === "custom" ? "tictactoe" : env].train;
  const c = env === "custom" ? CUSTOM_DEFAULTS : t;
  return {
    steps: String(c.steps),
    groupSize: String(c.groupSize),
    groupsPerStep: String(c.groupsPerStep),
    maxGroups: t.maxGroups ? String(t.maxGroups) : "",
    temperature: String(t.temperature ?? 1),
    toolChoice: t.toolChoice ?? "auto",
    maxTokens: defaultMaxTokens(env),
    explore: String(t.explore ?? 0),
  };
}

/**
 * The draft after picking another env: each setting still at the old env's default takes the new env's (a tool
 * call takes far more tokens than a move; the email env trains guided calls), what the user changed stays; the
 * reward follows what the env can be scored by.
 */
export function switchEnv(d: SettingsDraft, env: EnvName): SettingsDraft {
  // A custom task is judged by RULER only; 2048 by its score only; the self-judge is for custom tasks.
  const reward =
    env === "custom"
      ? d.reward === "env"
        ? "ruler"
        : d.reward
      : env === "2048" || d.reward === "self"
        ? "env"
        : d.reward;
  const before = envDefaults(d.env);
  const after = envDefaults(env);
  const next: SettingsDraft = { ...d, env, reward };
  for (const k of Object.keys(after) as (keyof typeof after)[])
    if (d[k] === before[k]) (next as unknown as Record<string, string>)[k] = after[k];
  return next;
}

/** Whether the draft's env explores: tic-tac-toe its moves, email its answers among guided calls. */
export const exploresIn = (d: SettingsDraft): boolean =>
  d.env === "tictactoe" || (d.env === "email" && d.toolChoice === "guided");

export function newRunName(env: EnvName): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, "0");
  return `${env === "tictactoe" ? "ttt" : env}-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

export function defaultDraft(): SettingsDraft {
  const saved = typeof localStorage !== "undefined" ? localStorage.getItem(KEY_STORAGE) : null;
  return {
    name: newRunName("tictactoe"),
    env: "tictactoe",
    reward: "env",
    rulerBaseURL: "http://127.0.0.1:11434/v1",
    rulerModel: "",
    rulerApiKey: saved ?? "",
    rememberKey: saved !== null,
    systemPrompt: "",
    scenarioText: "",
    scenarioFormat: "lines",
    scenarioFile: "",
    rubric: "",
    turns: "1",
    userPrompt: "You are a user who asked the assistant for help. Reply in one or two sentences, as that user would.",
    valEvery: String(CUSTOM_DEFAULTS.validateEvery),
    warmStart: "0",
    // npm run train's defaults: the recipe measured to teach tic-tac-toe (models/README.md).
    steps: String(GAMES.tictactoe.train.steps),
    groupSize: "8",
    groupsPerStep: "4",
    maxGroups: GAMES.tictactoe.train.maxGroups ? String(GAMES.tictactoe.train.maxGroups) : "",
    learningRate: "1e-3",
    beta: String(GAMES.tictactoe.train.beta ?? 0),
    loraRank: "8",
    seed: "1",
    maxTokens: defaultMaxTokens("tictactoe"),
    temperature: "1",
    opponents: (GAMES.tictactoe.train.opponents ?? ["random"]).join(","),
    starts: (GAMES.tictactoe.train.starts ?? ["empty"]).join(","),
    decisionReward: String(GAMES.tictactoe.train.decisionReward ?? 0),
    explore: String(GAMES.tictactoe.train.explore ?? 0),
    legalMoves: false,
    toolChoice: "auto",
    memoryBudget: String(DEFAULT_BUDGET_GIB),
    q4: false,
  };
}

function int(v: string, field: string, lo: number, hi: number, errors: DraftErrors, key: keyof SettingsDraft): number {
  const n = Number(v.trim());
  if (v.trim() === "" || !Number.isInteger(n)) errors[key] = `${field} must be a whole number`;
  else if (n < lo || n > hi) errors[key] = `${field} must be between ${lo} and ${hi}`;
  return n;
}

function real(
  v: string,
  field: string,
  lo: number,
  hi: number,
  errors: DraftErrors,
  key: keyof SettingsDraft,
  example = "5e-4",
): number {
  const n = Number(v.trim());
  if (v.trim() === "" || !Number.isFinite(n)) errors[key] = `${field} must be a number (e.g. ${example})`;
  else if (n <= lo || n > hi) errors[key] = `${field} must be above ${lo} and at most ${hi}`;
  return n;
}

export function validate(d: SettingsDraft): { settings: TrainSettings | null; errors: DraftErrors } {
  const errors: DraftErrors = {};
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(d.name)) {
    errors.name = "Use letters, digits, '.', '_' or '-' (up to 64, not starting with '.' or '-')";
  }
  const steps = int(d.steps, "Steps", 1, 10000, errors, "steps");
  const groupSize = int(d.groupSize, "Group size", 2, 32, errors, "groupSize");
  const groupsPerStep = int(d.groupsPerStep, "Groups per step", 1, 16, errors, "groupsPerStep");
  const maxGroups =
    d.maxGroups.trim() === ""
      ? groupsPerStep
      : int(d.maxGroups, "Most groups drawn a step", 1, 64, errors, "maxGroups");
  if (!errors.maxGroups && !errors.groupsPerStep && maxGroups < groupsPerStep)
    errors.maxGroups = `Most groups drawn a step must be at least the groups per step (${groupsPerStep})`;
  const learningRate = real(d.learningRate, "Learning rate", 0, 1, errors, "learningRate");
  const beta = Number(d.beta.trim());
  if (d.beta.trim() === "" || !(beta >= 0 && beta <= 10))
    errors.beta = "KL penalty (beta) must be a number from 0 (none) to 10 (e.g. 0.05)";
  const loraRank = int(d.loraRank, "LoRA rank", 1, 256, errors, "loraRank");
  const seed = int(d.seed, "Seed", 0, 2 ** 31 - 1, errors, "seed");
  const maxTokens = int(d.maxTokens, "Max tokens per move", 1, 512, errors, "maxTokens");
  const temperature = real(d.temperature, "Temperature", 0, 2, errors, "temperature");
  let opponents = "random";
  try {
    opponents = parseOpponents(d.opponents).join(",");
  } catch {
    errors.opponents = `A comma-separated list of ${Object.keys(TICTACTOE_OPPONENTS).join(", ")}`;
  }
  let starts = "empty";
  try {
    starts = parseStarts(d.starts).join(",");
  } catch {
    errors.starts = `A comma-separated list of ${TICTACTOE_STARTS.join(", ")}`;
  }
  // Shown and saved for tic-tac-toe only (a hidden field's error would block Start with nothing to read).
  const decisionReward = Number(d.decisionReward.trim());
  if (d.env === "tictactoe" && (d.decisionReward.trim() === "" || !(decisionReward >= 0 && decisionReward <= 10)))
    errors.decisionReward = "Decision reward must be a number from 0 (the outcome alone) to 10 (e.g. 0.5)";
  const explores = exploresIn(d);
  const explore = Number(d.explore.trim());
  if (explores && (d.explore.trim() === "" || !(explore >= 0 && explore <= 1)))
    errors.explore = "Exploration must be a probability from 0 (none) to 1 (e.g. 0.1)";
  const memoryBudgetGiB = real(d.memoryBudget, "GPU memory budget (GiB)", 0, 1024, errors, "memoryBudget", "4");
  let custom: TrainSettings["custom"];
  if (d.env === "custom") custom = validateCustom(d, seed, errors);
  if (d.env === "custom" && d.reward === "env")
    errors.reward = "A custom task has no score of its own: pick a RULER judge (an endpoint, or the loaded model).";
  if (d.reward === "self" && d.env !== "custom")
    errors.reward = "The loaded model judges custom tasks only; games use their score or a judge endpoint.";
  if (d.reward === "ruler") {
    try {
      const u = new URL(d.rulerBaseURL);
      if (!/^https?:$/.test(u.protocol)) throw new Error();
    } catch {
      errors.rulerBaseURL = "An http(s) URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1";
    }
    if (!d.rulerModel.trim()) errors.rulerModel = "The judge model's name at that endpoint";
    if (d.env === "2048")
      errors.reward =
        "RULER judges one conversation per game; 2048 keeps each move apart. Use the game score for 2048.";
  }
  if (Object.keys(errors).length) return { settings: null, errors };
  return {
    settings: {
      env: d.env,
      ...(custom ? { custom } : {}),
      steps,
      groupSize,
      groupsPerStep,
      maxGroups,
      learningRate,
      beta,
      loraRank,
      seed,
      maxTokens,
      temperature,
      opponents,
      starts,
      ...(d.env === "tictactoe" ? { decisionReward } : {}),
      ...(explores ? { explore } : {}),
      ...(d.env === "tictactoe" && d.legalMoves ? { legalMoves: true } : {}),
      ...(d.env === "email" && d.toolChoice !== "auto" ? { toolChoice: d.toolChoice } : {}),
      memoryBudgetGiB,
      ...(d.q4 ? { quantize: "q4" as const } : {}),
      reward:
        d.reward === "env"
          ? { kind: "env" }
          : d.reward === "self"
            ? { kind: "self" }
            : { kind: "ruler", baseURL: d.rulerBaseURL.trim(), model: d.rulerModel.trim(), apiKey: d.rulerApiKey },
    },
    errors,
  };
}

/** The scenarios of a draft, or the message saying what is wrong with them (line numbers included). */
export function draftScenarios(d: SettingsDraft, seed: number): { scenarios: CustomScenario[] } | { error: string } {
  try {
    const scenarios = parseScenarios(d.scenarioText, d.scenarioFormat);
    splitScenarios(scenarios, { seed }); // at least one to train on and one to validate with
    return { scenarios };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

function validateCustom(d: SettingsDraft, seed: number, errors: DraftErrors): TrainSettings["custom"] {
  if (!d.systemPrompt.trim()) errors.systemPrompt = "Say what the task is: the model and the judge both read it";
  const parsed = draftScenarios(d, Number.isInteger(seed) ? seed : 0);
  if ("error" in parsed) errors.scenarioText = parsed.error;
  const turns = int(d.turns, "Turns", 1, 8, errors, "turns");
  const valEvery = int(d.valEvery, "Validate every", 1, 10000, errors, "valEvery");
  const warmStartEpochs = int(d.warmStart, "Warm start", 0, 100, errors, "warmStart");
  if (turns > 1 && !d.userPrompt.trim()) errors.userPrompt = "Tell the simulated user how to behave";
  if ("error" in parsed) return undefined;
  const train = splitScenarios(parsed.scenarios, { seed: Number.isInteger(seed) ? seed : 0 }).train;
  if (warmStartEpochs > 0 && !errors.warmStart && !warmStartConversations(d, train).length)
    errors.warmStart =
      `A warm start trains on the scenarios' "${ANSWER_FIELD}" field, and no training scenario has one: ` +
      `upload JSONL or CSV with an ${ANSWER_FIELD} for some prompts, or set 0`;
  return {
    systemPrompt: d.systemPrompt.trim(),
    scenarios: parsed.scenarios,
    rubric: d.rubric.trim(),
    turns,
    userPrompt: d.userPrompt.trim(),
    valEvery,
    ...(warmStartEpochs > 0 ? { warmStartEpochs } : {}),
  };
}

/** A custom task's scenarios as text again (JSONL when any has extra fields, else one per line). */
function scenariosText(s: CustomScenario[]): { text: string; format: ScenarioFormat } {
  return s.some((x) => x.fields || x.prompt.includes("\n"))
    ? { text: s.map((x) => JSON.stringify({ prompt: x.prompt, ...x.fields })).join("\n"), format: "jsonl" }
    : { text: s.map((x) => x.prompt).join("\n"), format: "lines" };
}

/** The form showing a saved run's settings (the key is not saved with runs; the one in memory is kept). */
export function draftFrom(name: string, s: TrainSettings, current: SettingsDraft): SettingsDraft {
  return {
    ...current,
    name,
    env: s.env,
    reward: s.reward.kind,
    ...(s.custom
      ? (() => {
          const { text, format } = scenariosText(s.custom.scenarios);
          return {
            systemPrompt: s.custom.systemPrompt,
            scenarioText: text,
            scenarioFormat: format,
            scenarioFile: "",
            rubric: s.custom.rubric,
            turns: String(s.custom.turns),
            userPrompt: s.custom.userPrompt,
            valEvery: String(s.custom.valEvery),
            warmStart: String(s.custom.warmStartEpochs ?? 0),
          };
        })()
      : {}),
    rulerBaseURL: s.reward.kind === "ruler" ? s.reward.baseURL : current.rulerBaseURL,
    rulerModel: s.reward.kind === "ruler" ? s.reward.model : current.rulerModel,
    steps: String(s.steps),
    groupSize: String(s.groupSize),
    groupsPerStep: String(s.groupsPerStep),
    maxGroups: s.maxGroups && s.maxGroups !== s.groupsPerStep ? String(s.maxGroups) : "",
    learningRate: String(s.learningRate),
    beta: String(s.beta ?? 0),
    loraRank: String(s.loraRank),
    seed: String(s.seed),
    maxTokens: String(s.maxTokens),
    temperature: String(s.temperature),
    opponents: s.opponents ?? "random",
    starts: s.starts ?? "empty",
    decisionReward: String(s.decisionReward ?? 0),
    explore: String(s.explore ?? 0),
    legalMoves: s.legalMoves ?? false,
    toolChoice: s.toolChoice ?? "auto",
    memoryBudget: String(s.memoryBudgetGiB ?? DEFAULT_BUDGET_GIB),
    q4: s.quantize === "q4",
  };
}
