// The training form's fields as typed text, their defaults, and validation into TrainSettings with one
// message per field (shown next to it).
import { parseOpponents, TICTACTOE_OPPONENTS } from "webart/envs";
import type { EnvName, TrainSettings } from "../api.ts";

export interface SettingsDraft {
  name: string;
  env: EnvName;
  reward: "env" | "ruler";
  rulerBaseURL: string;
  rulerModel: string;
  rulerApiKey: string;
  rememberKey: boolean;
  steps: string;
  groupSize: string;
  groupsPerStep: string;
  learningRate: string;
  loraRank: string;
  seed: string;
  maxTokens: string;
  temperature: string;
  /** Tic-tac-toe opponents, one per group in turn, comma-separated (e.g. "random,winning"). */
  opponents: string;
  /** GiB of GPU memory the run may plan for. */
  memoryBudget: string;
}

export type DraftErrors = Partial<Record<keyof SettingsDraft, string>>;

export const KEY_STORAGE = "webart.rulerApiKey";

/** The engine's default memory budget in a browser (defaultMemoryBudget), in GiB: WebGPU does not say how much
 *  memory a GPU has, and 4 GiB is what integrated GPUs and a tab commonly allow. */
export const DEFAULT_BUDGET_GIB = 4;

export function newRunName(env: EnvName): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, "0");
  return `${env === "tictactoe" ? "ttt" : "2048"}-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
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
    // npm run train's defaults: the recipe measured to teach tic-tac-toe (models/README.md).
    steps: "250",
    groupSize: "8",
    groupsPerStep: "4",
    learningRate: "1e-3",
    loraRank: "8",
    seed: "1",
    maxTokens: "12",
    temperature: "1",
    opponents: "random",
    memoryBudget: String(DEFAULT_BUDGET_GIB),
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
  const learningRate = real(d.learningRate, "Learning rate", 0, 1, errors, "learningRate");
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
  const memoryBudgetGiB = real(d.memoryBudget, "GPU memory budget (GiB)", 0, 1024, errors, "memoryBudget", "4");
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
      steps,
      groupSize,
      groupsPerStep,
      learningRate,
      loraRank,
      seed,
      maxTokens,
      temperature,
      opponents,
      memoryBudgetGiB,
      reward:
        d.reward === "env"
          ? { kind: "env" }
          : { kind: "ruler", baseURL: d.rulerBaseURL.trim(), model: d.rulerModel.trim(), apiKey: d.rulerApiKey },
    },
    errors,
  };
}

/** The form showing a saved run's settings (the key is not saved with runs; the one in memory is kept). */
export function draftFrom(name: string, s: TrainSettings, current: SettingsDraft): SettingsDraft {
  return {
    ...current,
    name,
    env: s.env,
    reward: s.reward.kind,
    rulerBaseURL: s.reward.kind === "ruler" ? s.reward.baseURL : current.rulerBaseURL,
    rulerModel: s.reward.kind === "ruler" ? s.reward.model : current.rulerModel,
    steps: String(s.steps),
    groupSize: String(s.groupSize),
    groupsPerStep: String(s.groupsPerStep),
    learningRate: String(s.learningRate),
    loraRank: String(s.loraRank),
    seed: String(s.seed),
    maxTokens: String(s.maxTokens),
    temperature: String(s.temperature),
    opponents: s.opponents ?? "random",
    memoryBudget: String(s.memoryBudgetGiB ?? DEFAULT_BUDGET_GIB),
  };
}
