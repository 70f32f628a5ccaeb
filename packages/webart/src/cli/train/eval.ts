// `webart eval`: N games of the base model, a checkpoint of a run, and the baselines (random legal
import { appendFile, writeFile } from "node:fs/promises";
// player; perfect minimax for tic-tac-toe; perfect and naive scripted searchers for email), as one table.
import { realpathSync } from "node:fs";
import { Engine, FsStore, LoraState, readAdapterConfig, RunFiles, stepDir } from "@webart/engine";
import {
  emailScenario,
  evaluate2048,
  evaluateTicTacToe,
  minimaxTicTacToePlayer,
  naiveSearcher,
  perfectSearcher,
  random2048Player,
  randomTicTacToePlayer,
  rolloutEmail,
  scriptedOpenAI,
  summarizeEmail,
  GAMES,
  type ScriptedPolicy,
  CUSTOM_DEFAULTS,
} from "@webart/envs";
import { num, oneOf, parseOptions, quantizeOption, refuseGiven, UsageError, type CommandSpec } from "../args.ts";
import { validateCustomTask, withBaseModel } from "../../custom.ts";
import {
  checkJudgeOption,
  customTaskOptions,
  JUDGE_OPTIONS,
  judgeOf,
  TASK_OPTIONS,
  type CustomTaskOptions,
} from "./custom.ts";
import { ENVS, toolChoiceOption } from "./train.ts";

export const EVAL = {
  name: "eval",
  about:
    "N games each of the base model, a checkpoint of a run and the baselines (a random legal player; perfect minimax\n" +
    "for tic-tac-toe; perfect and naive scripted searchers for email, on its held-out questions), as one table.\n" +
    "--seed seeds the games and their samples: the same command gives the same table. Your own task (--env custom):\n" +
    "the checkpoint and the base model answer every scenario of --data, each pair judged side by side by RULER.",
  options: {
    env: { arg: "NAME", default: "tictactoe", help: "tictactoe, 2048, email or custom (your own task: --data)" },
    games: { arg: "N", default: "100", help: "games per player" },
    checkpoint: { arg: "STEP", default: "latest", help: "a step number, latest, or none" },
    model: {
      arg: "DIR|URL|ID",
      help:
        "base model (default: the one the run was trained on, from its model.json; with --checkpoint none the\n" +
        "embedded webart-tiny, or webart-tools for email)",
    },
    name: { arg: "NAME", default: "agent", help: "run (model) name" },
    project: { arg: "NAME", help: "project (default: the env)" },
    runs: { arg: "DIR", default: ".art", help: "folder holding the runs" },
    seed: { arg: "N", default: "12345", help: "seed of the evaluation games (different from training's)" },
    temperature: { arg: "X", default: "1", help: "sampling temperature" },
    "max-tokens": {
      arg: "N",
      help: "max tokens per model turn (default 12 for the games, 200 for email, 128 for a custom task)",
    },
    "tool-choice": {
      arg: "auto|required|guided",
      help: "email: required forces a tool call every turn, constrained to a tool's schema; guided also\nlimits its values to what the episode has shown (as train's; default guided for email, else auto)",
    },
    "legal-moves": {
      flag: true,
      help: "tic-tac-toe: every model's moves sampled among the legal ones (guided_choice of the empty\ncells, as train's --legal-moves), so no game ends on an illegal reply",
    },
    quantize: {
      arg: "q4",
      help: "the base model's weights as 4-bit ones (default: as the run was trained, from its\nmodel.json; with --checkpoint none, off)",
    },
    "no-base": { flag: true, help: "leave out the base model's row" },
    "no-baselines": { flag: true, help: "leave out the baselines' rows" },
    ...TASK_OPTIONS,
    ...JUDGE_OPTIONS,
    json: { flag: true, help: "print the rows as one JSON array instead of a table" },
    trajectories: {
      arg: "FILE",
      help: "also write the models' episodes to FILE, a JSON line each: {player, trajectory} (messages, tool\ncalls and results, reward, metrics)",
    },
  },
} satisfies CommandSpec;

type Row = { player: string; [k: string]: unknown };

export async function evalCommand(argv: string[]): Promise<number> {
  const a = parseOptions(EVAL, argv);
  const env = oneOf("env", a.env, [...ENVS, "custom"] as const);
  const gameOnly = ["games", "legal-moves", "tool-choice", "no-base", "no-baselines"];
  refuseGiven(argv, env === "custom" ? gameOnly : Object.keys(TASK_OPTIONS), `--env ${env}`);
  let custom: (CustomTaskOptions & { judge: ReturnType<typeof judgeOf> }) | undefined;
  if (env === "custom") {
    if (a.checkpoint === "none")
      throw new UsageError(
        "--env custom judges the checkpoint against the base model: --checkpoint none leaves no pair",
      );
    custom = { ...customTaskOptions(a), judge: judgeOf(a, "--env custom") };
    await checkJudgeOption(custom.judge);
  }
  // A game's registry entry (a custom task takes only the embedded base model from tic-tac-toe's).
  const genv = env === "custom" ? "tictactoe" : env;
  const game = GAMES[genv];
  const games = num("games", a.games, { int: true, min: 1 });
  const seed = num("seed", a.seed, { int: true, min: 0 });
  const temperature = num("temperature", a.temperature, { min: 0 });
  const maxTokens = num("max-tokens", a["max-tokens"] ?? String(custom ? CUSTOM_DEFAULTS.maxTokens : game.maxTokens), {
    int: true,
    min: 1,
  });
  const toolChoice = toolChoiceOption(a["tool-choice"] ?? game.train.toolChoice ?? "auto", env);
  const legalMoves = a["legal-moves"];
  if (legalMoves && env !== "tictactoe") throw new UsageError("--legal-moves is for --env tictactoe only");
  const checkpoint = a.checkpoint === "latest" || a.checkpoint === "none" ? a.checkpoint : Number(a.checkpoint);
  if (typeof checkpoint === "number" && !/^\d+$/.test(a.checkpoint))
    throw new UsageError(`--checkpoint ${JSON.stringify(a.checkpoint)}: expected a step number, latest or none`);
  const project = a.project || env;
  const rows: Row[] = [];
  // A checkpoint is an adapter of the base model its run was trained on (model.json), so that is the model played;
  // --model may only name the same one.
  let baseModel = a.model ?? game.model;
  const files = checkpoint === "none" ? undefined : new RunFiles(await FsStore.open(a.runs), project, a.name);
  const saved = await files?.readJson<{ base_model?: string; quantize?: "q4" }>("model.json");
  const runBase = saved?.base_model;
  if (files && runBase !== undefined && !sameModel(runBase, baseModel)) {
    if (a.model !== undefined)
      throw new UsageError(
        `--model ${a.model}: run ${project}/${a.name} was trained on base model ${runBase} (${files.path("model.json")}), ` +
          `and its checkpoints are adapters of that model. Leave --model out to play it, or pass --checkpoint none ` +
          `to evaluate ${a.model} alone`,
      );
    baseModel = runBase;
  }
  const step = checkpoint === "none" || !files ? null : checkpoint === "latest" ? await files.latestStep() : checkpoint;
  if (custom && step === null)
    throw new UsageError(
      `no run ${project}/${a.name} in ${a.runs}: --env custom judges a checkpoint against its base model`,
    );
  if (a.trajectories) await writeFile(a.trajectories, "");
  // The run's checkpoints are adapters of the weights it trained on: q4 if it was trained so.
  let quantize = quantizeOption(a.quantize);
  if (files && saved && runBase !== undefined) {
    if (a.quantize !== undefined && quantize !== saved.quantize)
      throw new UsageError(
        `--quantize ${a.quantize}: run ${project}/${a.name} was trained on ${saved.quantize ? `${saved.quantize} weights` : "the base model's own weights"} ` +
          `(${files.path("model.json")}); leave --quantize out to play it as it was trained`,
      );
    quantize = saved.quantize;
  }
  const baseLabel = `base model (${baseModel.split("/").pop()}${quantize ? `, ${quantize}` : ""})`;
  const engine = await Engine.load(baseModel, {
    name: "eval",
    quantize,
    kvSlots: 64,
    maxContext: custom ? undefined : game.maxContext,
  });
  /** The run's adapter at `step`, on the engine's model. */
  const loadCheckpoint = async (step: number): Promise<LoraState> => {
    const ck = await files!.readCheckpoint(step);
    const lora = readAdapterConfig(
      ck.adapterConfig,
      `${files!.path(`checkpoints/${stepDir(step)}`)}/adapter_config.json`,
    );
    const state = new LoraState(engine.gpu, engine.config, lora);
    await state.load(ck.adapter);
    return state;
  };
  if (custom) {
    const state = await loadCheckpoint(step!);
    const label = { base: baseLabel, checkpoint: `checkpoint ${step}` };
    engine.model.lora = state;
    const v = await validateCustomTask(engine.openaiClient(), {
      model: "eval",
      temperature,
      maxTokens,
      task: custom.task,
      val: custom.scenarios,
      judge: custom.judge,
      rubric: custom.rubric,
      seed, // the same command replays the same samples; base and checkpoint draw alike
      withBaseModel: (fn) => withBaseModel(engine, fn),
    });
    await engine.close();
    const n = v.groups.length;
    const rewards = v.groups.map((g) => g.trajectories.map((t) => t.reward));
    const row = (player: string, k: number, score: number): Row => ({
      player,
      scenarios: n,
      meanScore: score,
      preferred: rewards.filter((r) => r[k] > r[1 - k]).length / n,
      tied: rewards.filter((r) => r[0] === r[1]).length / n,
    });
    rows.push(row(label.base, 0, v.base), row(label.checkpoint, 1, v.checkpoint));
    if (a.trajectories)
      await appendFile(
        a.trajectories,
        v.groups
          .flatMap((g) => g.trajectories.map((t, k) => ({ player: k ? label.checkpoint : label.base, trajectory: t })))
          .map((x) => JSON.stringify(x) + "\n")
          .join(""),
      );
    return printRows(rows, ["scenarios", "meanScore", "preferred", "tied"], a.json);
  }
  const play = async (label: string) => {
    const client = engine.openaiClient();
    const opts = { model: "eval", temperature, maxTokens, toolChoice };
    const trajs = [];
    for (let i = 0; i < games; i += 32) {
      const n = Math.min(32, games - i);
      trajs.push(
        ...(await Promise.all(
          Array.from({ length: n }, (_, k) => {
            // The game's seed also seeds its samples, so the same command gives the same table on the same machine.
            // Email plays its held-out questions, never training's.
            const scenario = { seed: seed + i + k, split: "eval" as const, ...(legalMoves ? { legalMoves } : {}) };
            return game.rollout(client, { ...opts, seed: seed + i + k, scenario });
          }),
        )),
      );
    }
    rows.push({ player: label, ...game.summarize(trajs) });
    if (a.trajectories)
      await appendFile(
        a.trajectories,
        trajs.map((t) => JSON.stringify({ player: label, trajectory: t }) + "\n").join(""),
      );
  };
  if (!a["no-base"]) await play(baseLabel);
  if (files && checkpoint !== "none") {
    if (step === null) {
      console.log(`(no run ${project}/${a.name} in ${a.runs}: checkpoint row skipped)`);
    } else {
      engine.model.lora = await loadCheckpoint(step);
      engine.scheduler.invalidateCache();
      await play(`checkpoint ${step}`);
      engine.model.lora = undefined;
    }
  }
  const baselineSeed = { games, seed };
  if (!a["no-baselines"] && env === "tictactoe") {
    rows.push({
      player: "random legal",
      ...(await evaluateTicTacToe(randomTicTacToePlayer(seed), baselineSeed)),
    } as Row);
    rows.push({
      player: "minimax (perfect)",
      ...(await evaluateTicTacToe(minimaxTicTacToePlayer(), baselineSeed)),
    } as Row);
  } else if (!a["no-baselines"] && env === "email") {
    // The scripted searchers through a fake server, on the same held-out questions as the model.
    const searchers = async (policy: (i: number) => ScriptedPolicy) =>
      summarizeEmail(
        await Promise.all(
          Array.from({ length: games }, (_, i) =>
            rolloutEmail(scriptedOpenAI(policy(seed + i)).client, {
              model: "scripted",
              scenario: emailScenario("eval", seed + i),
            }),
          ),
        ),
      );
    rows.push({ player: "perfect searcher", ...(await searchers((i) => perfectSearcher(emailScenario("eval", i)))) });
    rows.push({ player: "naive searcher", ...(await searchers(() => naiveSearcher())) });
  } else if (!a["no-baselines"]) {
    rows.push({ player: "random legal", ...(await evaluate2048(random2048Player(seed), baselineSeed)) } as Row);
  }
  await engine.close();
  const cols = {
    tictactoe: [
      "games",
      "win",
      "draw",
      "loss",
      "invalid",
      "legalMoves",
      "meanReward",
      "winTaken",
      "blocked",
      "blockedOffFirst",
    ],
    "2048": ["games", "win", "invalid", "stuck", "meanMaxTile", "meanMoves", "noopRate", "meanReward"],
    email: [
      "episodes",
      "accuracy",
      "rightMessage",
      "answered",
      "malformed",
      "wellFormedCalls",
      "contextFull",
      "meanTurns",
      "meanReward",
    ],
  }[genv];
  return printRows(rows, cols, a.json);
}

/** The rows as a table of `cols` (or, with `json`, one JSON array). */
function printRows(rows: Row[], cols: string[], json: boolean): number {
  if (json) {
    console.log(JSON.stringify(rows));
    return 0;
  }
  const fmt = (v: unknown) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v));
  const w0 = Math.max(6, ...rows.map((r) => r.player.length));
  console.log(["player".padEnd(w0), ...cols.map((c) => c.padStart(Math.max(11, c.length)))].join(" "));
  for (const r of rows)
    console.log([r.player.padEnd(w0), ...cols.map((c) => fmt(r[c]).padStart(Math.max(11, c.length)))].join(" "));
  return 0;
}

/** The same model: the same name, or two paths to one folder. */
function sameModel(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}
