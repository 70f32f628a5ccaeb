// `webart train`: GRPO on a game with the embedded model (or any HF model): rollouts through the
// model's openai client, env or RULER rewards, one checkpoint per step, a metrics line per step, an SVG
// chart in the run folder; Ctrl-C finishes nothing half-way (the last checkpoint stays) and exits.
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LocalBackend, startupTuningLine, TrainableModel, type TrajectoryGroup } from "@webart/engine";
import {
  GAME_NAMES,
  GAMES,
  TICTACTOE_OPPONENTS,
  TICTACTOE_STARTS,
  type GameName,
  type TicTacToeOpponentName,
  CUSTOM_DEFAULTS,
} from "@webart/envs";
import { gameStepGroups } from "../../games.ts";
import { customStepGroups, validateCustomTask, withBaseModel } from "../../custom.ts";
import {
  checkJudgeOption,
  CUSTOM_ONLY,
  customRun,
  GAME_ONLY,
  JUDGE_OPTIONS,
  judgeOf,
  keepCustomTask,
  TASK_OPTIONS,
} from "./custom.ts";
import { trainingChart } from "./chart.ts";
import {
  bytes,
  num,
  oneOf,
  parseOptions,
  QUANTIZE_OPTION,
  quantizeOption,
  refuseGiven,
  UsageError,
  type CommandSpec,
} from "../args.ts";

export const ENVS = GAME_NAMES;
const OPPONENT_NAMES = Object.keys(TICTACTOE_OPPONENTS) as TicTacToeOpponentName[];

/** `--tool-choice` of train and eval: auto, required or guided, and the last two only for the env that has tools. */
export function toolChoiceOption(value: string, env: string): "auto" | "required" | "guided" {
  const choice = oneOf("tool-choice", value, ["auto", "required", "guided"] as const);
  if (choice !== "auto" && env !== "email") throw new UsageError("--tool-choice is for --env email only");
  return choice;
}

export const TRAIN = {
  name: "train",
  about:
    "GRPO on tic-tac-toe, 2048, email search or your own task (the embedded model by default): rollouts through the\n" +
    "model's openai client, rewards from the game or from a RULER judge, one checkpoint and one metrics line per step,\n" +
    "chart.svg in the run folder (RUNS/PROJECT/models/NAME). Ctrl-C stops after the current step; --resume continues\n" +
    "a run. Your own task (--env custom): scenarios from --data, a --system-prompt, every group judged by RULER, and\n" +
    "held-out scenarios scored every --validate-every steps, base model against the checkpoint.",
  options: {
    env: { arg: "NAME", default: "tictactoe", help: "tictactoe, 2048, email or custom (your own task: --data)" },
    steps: {
      arg: "N",
      help: "train until this step (default 160 for tic-tac-toe: ~20 min on 2 CPU cores; 250 for 2048; 25 for email: ~45 min;\n20 for a custom task, its warm start's steps included)",
    },
    "group-size": { arg: "N", help: "rollouts per group, same scenario (default 8)" },
    "groups-per-step": { arg: "N", help: "groups per step (default 4)" },
    "max-groups": {
      arg: "N",
      help: "dynamic sampling: draw up to N groups a step, more after the first --groups-per-step while fewer\nthan that many have rewards that differ (the others train nothing; default: --groups-per-step, none\nmore; 8 for email)",
    },
    lr: { arg: "X", default: "1e-3", help: "learning rate (AdamW, on the LoRA adapter)" },
    beta: {
      arg: "X",
      help: "KL penalty toward the base model, on the sampled tokens and on the assistant turns the model\ndid not sample (a --start decision opening) (default 0.01 for tic-tac-toe; else 0: none, as ART,\nand no reference pass)",
    },
    "anchor-beta": {
      arg: "X",
      help: "KL penalty on the assistant turns the model did not sample only (a --start decision opening),\nin place of --beta there; with --beta 0 the sampled tokens get none (default: --beta)",
    },
    model: {
      arg: "DIR|URL|ID",
      help: "base model: folder, URL or Hugging Face id (default: the embedded webart-tiny, or webart-tools for email)",
    },
    reward: {
      arg: "env|ruler",
      help: "env (the game's score) or ruler (an LLM judge) (default env; a custom task: ruler)",
    },
    ...JUDGE_OPTIONS,
    resume: { flag: true, help: "continue the run from its latest checkpoint" },
    seed: { arg: "N", default: "1", help: "seed for scenarios and the adapter's initialisation" },
    name: { arg: "NAME", default: "agent", help: "run (model) name" },
    project: { arg: "NAME", help: "project (default: the env)" },
    runs: { arg: "DIR", default: ".art", help: "folder holding the runs" },
    "max-tokens": {
      arg: "N",
      help: "max tokens per model turn (default 12 for the games, 200 for email, 128 for a custom task)",
    },
    temperature: { arg: "X", help: "sampling temperature for rollouts (default 1; 1.5 for email)" },
    opponent: {
      arg: "LIST",
      help: `tic-tac-toe opponents, one per group in turn: ${Object.keys(TICTACTOE_OPPONENTS).join(", ")}\n(default random,winning; e.g. random; eval always plays random)`,
    },
    start: {
      arg: "LIST",
      help: "where tic-tac-toe games start, one per group in turn: empty, or decision (an opening up to\na win to take or a threat to block; default decision; e.g. empty,decision; eval always starts empty)",
    },
    "decision-reward": {
      arg: "X",
      help: "tic-tac-toe: add X x (right - missed) / faced over the agent's decisions (wins to take,\nthreats to block) to each game's reward (default 0: the outcome alone; eval scores outcomes)",
    },
    explore: {
      arg: "P",
      help: "tic-tac-toe: each training move is, with probability P, a random empty cell asked of the\nmodel through guided_choice; email (guided calls): each answer given after reading an email\nis, with probability P, a random sentence or line of that email, asked as a forced call.\nTrained only when its episode beats the group's mean, never in the KL term (default 0; 0.3\nfor email's guided calls)",
    },
    "legal-moves": {
      flag: true,
      help: "tic-tac-toe: each training move is sampled among the legal moves (guided_choice of the\nempty cells) and trained over them (eval plays freely unless given --legal-moves)",
    },
    "tool-choice": {
      arg: "auto|required|guided",
      help: "email: required forces a tool call every turn, its tokens constrained to a tool's schema;\nguided also limits each value to what the episode has shown (search words from the question,\nids from the results, answers from the text read); auto: the model's choice (a reply that is\nno call ends the episode as malformed) (default guided for email, else auto)",
    },
    scenarios: {
      arg: "shared|independent",
      default: "shared",
      help: "shared: a group's rollouts play one scenario; independent: each its own (as ART's tic-tac-toe)",
    },
    "scale-rewards": {
      arg: "group|none",
      help: "group: each group's advantages divided by its reward std (ART's default); none: reward minus the\ngroup's mean (Dr. GRPO), so a group whose rewards differ by little moves the adapter little (default group)",
    },
    "loss-type": {
      arg: "sequence|token|dr_grpo",
      default: "sequence",
      help: "how a step averages token losses: sequence (each trajectory weighs the same, as ART), token (every\ntoken the same), dr_grpo (the sum over the step's longest trajectory's length)",
    },
    "lora-rank": { arg: "N", default: "8", help: "LoRA rank" },
    "max-histories": {
      arg: "N",
      default: "0",
      help: "train on at most this many moves per game, the last always kept\n(0: all, as ART does)",
    },
    ...TASK_OPTIONS,
    "validate-every": {
      arg: "N",
      help: "custom: score the held-out scenarios every N steps and at the last, base model against the\ncheckpoint, judged side by side (default 5)",
    },
    "warm-start": {
      arg: "N",
      help: "custom: N supervised epochs on the training scenarios' answer field first, a step each (default 0)",
    },
    "memory-budget": {
      arg: "SIZE",
      help: "GPU memory webart may use, e.g. 6GB or 4096MiB; plans over it are refused before loading\n(default 16 GiB on a GPU, 8 GiB on a CPU device: webart info)",
    },
    ...QUANTIZE_OPTION,
  },
} satisfies CommandSpec;

export async function trainCommand(argv: string[]): Promise<number> {
  const a = parseOptions(TRAIN, argv);
  const env = oneOf("env", a.env, [...ENVS, "custom"] as const);
  refuseGiven(argv, env === "custom" ? GAME_ONLY : CUSTOM_ONLY, `--env ${env}`);
  const reward = oneOf("reward", a.reward ?? (env === "custom" ? "ruler" : "env"), ["env", "ruler"] as const);
  if (env === "custom" && reward !== "ruler")
    throw new UsageError("--env custom has no score of its own: it is judged by RULER (--reward ruler)");
  const custom = env === "custom" ? customRun(a, num("seed", a.seed, { int: true, min: 0 })) : undefined;
  // A custom task has defaults of its own, the embedded model as its base (as in the tab), the engine's context.
  const game =
    env === "custom"
      ? {
          ...GAMES.tictactoe,
          maxTokens: CUSTOM_DEFAULTS.maxTokens,
          maxContext: undefined,
          train: {
            steps: CUSTOM_DEFAULTS.steps,
            groupSize: CUSTOM_DEFAULTS.groupSize,
            groupsPerStep: CUSTOM_DEFAULTS.groupsPerStep,
          } as (typeof GAMES)["tictactoe"]["train"],
        }
      : GAMES[env];
  const steps = num("steps", a.steps ?? String(game.train.steps), { int: true, min: 1 });
  const G = num("group-size", a["group-size"] ?? String(game.train.groupSize), { int: true, min: 2 });
  const K = num("groups-per-step", a["groups-per-step"] ?? String(game.train.groupsPerStep), { int: true, min: 1 });
  const maxGroups = num("max-groups", a["max-groups"] ?? String(game.train.maxGroups ?? K), { int: true, min: K });
  const lr = num("lr", a.lr, { min: 0 });
  const beta = num("beta", a.beta ?? String(game.train.beta ?? 0), { min: 0 });
  const anchorBeta = num("anchor-beta", a["anchor-beta"] ?? String(beta), { min: 0 });
  const seed = num("seed", a.seed, { int: true, min: 0 });
  const maxTokens = num("max-tokens", a["max-tokens"] ?? String(game.maxTokens), { int: true, min: 1 });
  const temperature = num("temperature", a.temperature ?? String(game.train.temperature ?? 1), { min: 0 });
  const maxHistories = num("max-histories", a["max-histories"], { int: true, min: 0 });
  const rank = num("lora-rank", a["lora-rank"], { int: true, min: 1 });
  const memoryBudget = bytes("memory-budget", a["memory-budget"]);
  const quantize = quantizeOption(a.quantize);
  const opponent = a.opponent ?? (game.train.opponents ?? ["random"]).join(",");
  const start = a.start ?? (game.train.starts ?? ["empty"]).join(",");
  const opponents = opponent.split(",").map((o) => oneOf("opponent", o.trim(), OPPONENT_NAMES));
  const starts = start.split(",").map((o) => oneOf("start", o.trim(), TICTACTOE_STARTS));
  const decisionReward = num("decision-reward", a["decision-reward"] ?? String(game.train.decisionReward ?? 0), {
    min: 0,
  });
  if (decisionReward > 0 && env !== "tictactoe") throw new UsageError("--decision-reward is for --env tictactoe only");
  // The email default explores guided answers; a run that asks for other calls explores only if told to.
  const exploreDefault = env === "email" && a["tool-choice"] && a["tool-choice"] !== "guided" ? 0 : game.train.explore;
  const explore = num("explore", a.explore ?? String(exploreDefault ?? 0), { min: 0, max: 1 });
  if (explore > 0 && env === "2048") throw new UsageError("--explore is for --env tictactoe or email");
  const legalMoves = a["legal-moves"];
  if (legalMoves && env !== "tictactoe") throw new UsageError("--legal-moves is for --env tictactoe only");
  const toolChoice = toolChoiceOption(a["tool-choice"] ?? game.train.toolChoice ?? "auto", env);
  if (explore > 0 && env === "email" && toolChoice !== "guided")
    throw new UsageError(`--explore ${explore}: email explores answers among guided calls; pass --tool-choice guided`);
  const scaleRewards =
    oneOf("scale-rewards", a["scale-rewards"] ?? (game.train.scaleRewards === false ? "none" : "group"), [
      "group",
      "none",
    ] as const) === "group";
  const lossType = oneOf("loss-type", a["loss-type"], ["sequence", "token", "dr_grpo"] as const);
  const judge = reward === "ruler" ? judgeOf(a, custom ? "--env custom" : "--reward ruler") : undefined;
  // A judge that cannot answer in RULER's schema is named before anything loads.
  if (custom) await checkJudgeOption(judge!);
  const project = a.project || env;
  const backend = new LocalBackend({
    path: a.runs,
    engine: { kvSlots: Math.min(64, G * K), maxContext: game.maxContext, memoryBudget, quantize },
  });
  const model = new TrainableModel({ name: a.name, project, baseModel: a.model ?? game.model, seed, lora: { rank } });
  await model.register(backend);
  let step = await model.getStep();
  if (step > 0 && !a.resume) {
    throw new UsageError(
      `run ${project}/${a.name} already has ${step} steps in ${a.runs}: pass --resume to continue it, or --name for a new run`,
    );
  }
  const runDir = join(a.runs, project, "models", a.name);
  if (custom) {
    const changed = keepCustomTask(runDir, custom, step > 0);
    if (changed.length)
      console.error(
        `note: run ${project}/${a.name} was trained until step ${step} on another task: ${changed.join(", ")} changed ` +
          `(${join(runDir, "custom.json")}). It goes on with this one, its held-out split made anew from it.`,
      );
  }
  const client = model.openaiClient();
  let stopping = false;
  const onSignal = () => {
    if (stopping) process.exit(130);
    stopping = true;
    console.error("\nstopping after the current step (Ctrl-C again to quit now; the last checkpoint is kept)");
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  // The chart's points, kept beside the checkpoints so a resumed run draws its whole history.
  const scoreFile = join(runDir, "scores.jsonl");
  // A custom task's score is its checkpoint's validation score, with the base model's (absent between validations).
  type Point = { step: number; reward: number; score?: number; base?: number };
  const history: Point[] = existsSync(scoreFile)
    ? readFileSync(scoreFile, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Point)
        .filter((h) => h.step <= step)
    : [];
  const what =
    env === "custom"
      ? `, ${custom!.train.length} scenarios (${custom!.val.length} held out), ${custom!.task.turns} turn${custom!.task.turns > 1 ? "s" : ""}${custom!.warmStart ? `, warm start of ${custom!.warmStart} epoch${custom!.warmStart > 1 ? "s" : ""} on ${custom!.warmConversations.length} answers` : ""}, judge ${a["judge-model"]}`
      : `${env === "tictactoe" ? `, opponents ${opponent}, starts ${start}${decisionReward > 0 ? `, decision reward ${decisionReward}` : ""}${legalMoves ? ", legal moves" : ""}` : ""}${explore > 0 ? `, explore ${explore}` : ""}${toolChoice !== "auto" ? `, tool_choice ${toolChoice}` : ""}`;
  console.log(
    `training ${project}/${a.name} on ${env} from step ${step} to ${steps}: ${K} groups x ${G} rollouts per step${maxGroups > K ? ` (up to ${maxGroups} drawn)` : ""}, lr ${lr}${beta > 0 ? `, beta ${beta}` : ""}${anchorBeta !== beta ? `, anchor beta ${anchorBeta}` : ""}${what}${scaleRewards ? "" : ", advantages unscaled"}${lossType !== "sequence" ? `, loss ${lossType}` : ""}`,
  );
  console.log(startupTuningLine(backend.engine(model.spec).startupTuning));
  const sampling = { model: model.getInferenceName(), temperature, maxTokens };
  const gather = { maxExceptions: 0.2, description: `step ${step + 1}/${steps}` };
  try {
    while (step < steps && !stopping) {
      if (custom && step < custom.warmStart) {
        // The warm start: a supervised epoch on the training scenarios' answers, a step of its own.
        const r = await model.trainSft(
          custom.warmConversations.map((m) => ({ messagesAndChoices: m })),
          { learningRate: lr },
        );
        step = r.step;
        console.log(
          `step ${step}: warm start ${step}/${custom.warmStart}: supervised loss ${r.metrics.loss.toFixed(4)} on ` +
            `${custom.warmConversations.length} answers ${r.metrics.step_seconds.toFixed(1)}s`,
        );
        continue;
      }
      gather.description = `step ${step + 1}/${steps}`;
      const groups: TrajectoryGroup[] = custom
        ? await customStepGroups(client, step, {
            ...sampling,
            task: custom.task,
            train: custom.train,
            groupsPerStep: K,
            groupSize: G,
            judge: judge!,
            rubric: custom.rubric,
            gather,
          })
        : await gameStepGroups(client, step, {
            ...sampling,
            game: env as GameName,
            seed,
            groupsPerStep: K,
            maxGroups,
            groupSize: G,
            opponents,
            starts,
            decisionReward,
            explore,
            legalMoves,
            toolChoice,
            scenarios: oneOf("scenarios", a.scenarios, ["shared", "independent"] as const),
            judge: judge && { ...judge, swallowExceptions: true },
            gather,
          });
      const all = groups.flatMap((g) => g.trajectories);
      const summary = custom ? {} : GAMES[env as GameName].summarize(all);
      const score = custom ? undefined : GAMES[env as GameName].score(all);
      const r = await model.train(groups, {
        learningRate: lr,
        scaleRewards,
        lossType,
        maxHistoriesPerTrajectory: maxHistories,
        beta,
        // The turns a run never samples (a scripted opening) drift unless the KL term holds them too.
        anchorContextTurns: anchorBeta > 0,
        anchorBeta,
      });
      step = r.step;
      const m = r.metrics;
      const point: Point = { step, reward: m.reward, score };
      console.log(
        `step ${step}: reward ${m.reward.toFixed(3)} ±${m.reward_std.toFixed(3)} ${custom ? `judged ${all.length}` : stepScore(env as GameName, score!, summary)} ` +
          `loss ${m.loss.toFixed(4)} kl ${m.kl_div.toFixed(4)} entropy ${m.entropy.toFixed(3)} grad ${m.grad_norm.toFixed(3)} ` +
          `groups ${m.num_groups_trainable}/${m.num_groups_submitted} ${m.tokens_per_second.toFixed(0)} tok/s ${m.step_seconds.toFixed(1)}s`,
      );
      if (custom && (step % custom.validateEvery === 0 || step >= steps)) {
        // The held-out scenarios, base model and checkpoint side by side, judged together; logged as the val split.
        const v = await validateCustomTask(client, {
          ...sampling,
          task: custom.task,
          val: custom.val,
          judge: judge!,
          rubric: custom.rubric,
          withBaseModel: (fn) => withBaseModel(backend.engine(model.spec), fn),
          seed, // each validation replays the same samples' draws: steps compare on common random numbers
        });
        await model.log(v.groups, {
          split: "val",
          step,
          metrics: { base_score: v.base, checkpoint_score: v.checkpoint },
        });
        point.score = v.checkpoint;
        point.base = v.base;
        console.log(
          `validation at step ${step}: checkpoint ${v.checkpoint.toFixed(3)}, base model ${v.base.toFixed(3)} ` +
            `(${v.groups.length} held-out scenario${v.groups.length > 1 ? "s" : ""}, judged side by side)`,
        );
      }
      history.push(point);
      appendFileSync(scoreFile, JSON.stringify(point) + "\n");
      writeFileSync(join(runDir, "chart.svg"), trainingChart(`${project}/${a.name}`, env, history));
    }
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await backend.close();
  }
  console.log(`checkpoints in ${join(runDir, "checkpoints")}; chart ${join(runDir, "chart.svg")}`);
  return 0;
}

/** The game's numbers in a step's line. */
function stepScore(env: GameName, score: number, s: Record<string, number>): string {
  // A rate over no chances (a step whose games faced no threat) is NaN: shown as "-".
  const rate = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(2));
  if (env === "tictactoe")
    return (
      `win+draw ${score.toFixed(2)} legal ${rate(s.legalMoves)} ` +
      `wins taken ${rate(s.winTaken)} blocks ${rate(s.blocked)} (off first ${rate(s.blockedOffFirst)})`
    );
  if (env === "email")
    return `accuracy ${score.toFixed(2)} right email ${s.rightMessage.toFixed(2)} malformed ${s.malformed.toFixed(2)} turns ${s.meanTurns.toFixed(1)}`;
  return `max tile ${score.toFixed(1)} win ${s.win.toFixed(2)} invalid ${s.invalid.toFixed(2)}`;
}
