// The games by name: how a rollout is played through an openai client, how its trajectories are summarized, and
// which scenarios a training step plays. The CLI, the web worker and the eval command all go through here, so a
// seed gives the same games in Node and in the tab.
import type OpenAI from "openai";
import { emailScenario, summarizeEmail, rolloutEmail, type EmailSplit } from "./email/index.ts";
import { summarize2048, summarizeTicTacToe } from "./evaluate.ts";
import { TICTACTOE_OPPONENTS, type TicTacToeOpponentName } from "./players.ts";
import { rollout2048, rolloutTicTacToe, trainingScenarioSeed } from "./rollout.ts";
import { TICTACTOE_STARTS, type TicTacToeStart } from "./tictactoe.ts";
import type { SamplingOptions, TrajectoryLike } from "./types.ts";

export const GAME_NAMES = ["tictactoe", "2048", "email"] as const;
export type GameName = (typeof GAME_NAMES)[number];

export interface GameScenario {
  seed: number;
  /** Tic-tac-toe's opponent (default random); the others have none. */
  opponent?: TicTacToeOpponentName;
  /** Where a tic-tac-toe game starts (default empty; "decision": an opening up to a move that matters). */
  start?: TicTacToeStart;
  /** Tic-tac-toe's reward for the decisions themselves (TicTacToeOptions.decisionReward; default 0). */
  decisionReward?: number;
  /**
   * Exploration (default 0): tic-tac-toe's chance a move is a random empty cell (TicTacToeOptions.explore); the email
   * env's chance an answer is a random sentence of the email read (EmailRolloutOptions.explore).
   */
  explore?: number;
  /** Tic-tac-toe: each move sampled among the legal ones (TicTacToeOptions.legalMoves; default false). */
  legalMoves?: boolean;
  /**
   * The email env's scenarios: training's (default) or the held-out evaluation ones, `seed` being the index within
   * the split (the two splits never share an inbox). The games take the seed as it is.
   */
  split?: EmailSplit;
}

export interface Game {
  name: GameName;
  rollout(client: OpenAI, opts: SamplingOptions & { scenario: GameScenario }): Promise<TrajectoryLike>;
  /** Rates and means over games (win, invalid, ...), as `webart eval` prints them. */
  summarize(trajectories: TrajectoryLike[]): Record<string, number>;
  /** The headline number and its name: win+draw for tic-tac-toe, the mean largest tile for 2048, accuracy for email. */
  score(trajectories: TrajectoryLike[]): number;
  scoreName: string;
  /** Tokens per model turn unless told otherwise: a move is a few tokens, a tool call a hundred or more. */
  maxTokens: number;
  /** The context an engine for this game is loaded with; undefined: the engine's default (the model's, at most 2048). */
  maxContext?: number;
  /** The embedded model train and eval use unless told otherwise: webart-tiny for the games; webart-tools, whose
   *  tokenizer and context fit tool calls, for email. */
  model: "webart-tiny" | "webart-tools";
  /**
   * `webart train`'s defaults for this game: steps, rollouts per group, groups per step, and for tic-tac-toe the
   * opponents and starts taken in turn by group (the web form's defaults are the same).
   */
  train: {
    steps: number;
    groupSize: number;
    groupsPerStep: number;
    /** Dynamic sampling: up to this many groups drawn a step until groupsPerStep vary (default groupsPerStep). */
    maxGroups?: number;
    opponents?: readonly TicTacToeOpponentName[];
    starts?: readonly TicTacToeStart[];
    /** KL penalty toward the base model (default 0); it also holds the turns a run does not sample (an opening). */
    beta?: number;
    /** Tic-tac-toe's reward for the decisions themselves (default 0). */
    decisionReward?: number;
    /** Exploration (GameScenario.explore; default 0). */
    explore?: number;
    /** Divide each group's advantages by its reward std (default true, as ART); false: r - mean (Dr. GRPO). */
    scaleRewards?: boolean;
    /** Sampling temperature of the training rollouts (default 1; evaluation samples at 1 either way). */
    temperature?: number;
    /** Tool-using envs: how each turn's call is asked for, in training and evaluation (default "auto"). */
    toolChoice?: SamplingOptions["toolChoice"];
  };
}

const numbers = (o: object): Record<string, number> =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => typeof v === "number")) as Record<string, number>;

export const GAMES: Record<GameName, Game> = {
  tictactoe: {
    name: "tictactoe",
    rollout: (client, { scenario, ...opts }) =>
      rolloutTicTacToe(client, {
        ...opts,
        scenario: {
          seed: scenario.seed,
          opponent: TICTACTOE_OPPONENTS[scenario.opponent ?? "random"],
          start: scenario.start,
          decisionReward: scenario.decisionReward,
          explore: scenario.explore,
          legalMoves: scenario.legalMoves,
        },
      }),
    summarize: (t) => numbers(summarizeTicTacToe(t)),
    score: (t) => {
      const s = summarizeTicTacToe(t);
      return s.win + s.draw;
    },
    scoreName: "win+draw",
    maxTokens: 12,
    maxContext: 512,
    model: "webart-tiny",
    // The recipe measured in models/README.md (issue #27): games open where a move matters (a win to take or a threat
    // to block), against the winning opponent in every other group, so a missed block loses. Without a KL term the
    // opening's moves, which the run never samples, drifted into illegal replies by step 130; beta 0.01 holds them
    // (and the sampled tokens), where 0.05 also held back the blocks.
    train: {
      steps: 160,
      groupSize: 8,
      groupsPerStep: 4,
      opponents: ["random", "winning"],
      starts: ["decision"],
      beta: 0.01,
    },
  },
  "2048": {
    name: "2048",
    rollout: (client, { scenario, ...opts }) => rollout2048(client, { ...opts, scenario: { seed: scenario.seed } }),
    summarize: (t) => numbers(summarize2048(t)),
    score: (t) => summarize2048(t).meanMaxTile,
    scoreName: "max tile",
    maxTokens: 12,
    maxContext: 512,
    model: "webart-tiny",
    train: { steps: 250, groupSize: 8, groupsPerStep: 4 },
  },
  email: {
    name: "email",
    rollout: (client, { scenario, ...opts }) =>
      rolloutEmail(client, {
        ...opts,
        scenario: emailScenario(scenario.split ?? "train", scenario.seed),
        ...(scenario.explore ? { explore: scenario.explore } : {}),
      }),
    summarize: (t) => numbers(summarizeEmail(t)),
    score: (t) => summarizeEmail(t).accuracy,
    scoreName: "accuracy",
    maxTokens: 200,
    model: "webart-tools",
    // Guided calls (the question's words, the ids found, phrases read): the model chooses, the format cannot break.
    // Its choices are sure (a group often plays one episode many times), so rollouts sample at 1.5, and up to 12
    // groups are drawn a step until 8 have rewards that differ. More questions a step in smaller groups, advantages
    // r - mean, and 30% of the answers after a read explored: run G7 in models/README.md, held-out accuracy 0.31 ->
    // 0.48 in 20 steps (33 minutes on 2 cores; ~80 s a step).
    train: {
      steps: 25,
      groupSize: 4,
      groupsPerStep: 8,
      maxGroups: 12,
      temperature: 1.5,
      toolChoice: "guided",
      scaleRewards: false,
      explore: 0.3,
    },
  },
};

/** The game by name, or an error listing the names. */
export function gameByName(name: string): Game {
  if (!(GAME_NAMES as readonly string[]).includes(name))
    throw new Error(`unknown environment "${name}" (available: ${GAME_NAMES.join(", ")})`);
  return GAMES[name as GameName];
}

/** Names from a comma-separated list, or an error naming the bad one and the choices. */
function parseNames<T extends string>(what: string, list: string, choices: readonly T[]): T[] {
  return list.split(",").map((o) => {
    const name = o.trim();
    if (!(choices as readonly string[]).includes(name))
      throw new Error(`${what} ${JSON.stringify(name)} is not known (available: ${choices.join(", ")})`);
    return name as T;
  });
}

/** Opponents from a comma-separated list ("random,winning"). */
export const parseOpponents = (list: string): TicTacToeOpponentName[] =>
  parseNames("opponent", list, Object.keys(TICTACTOE_OPPONENTS) as TicTacToeOpponentName[]);

/** Starts from a comma-separated list ("empty,decision"). */
export const parseStarts = (list: string): TicTacToeStart[] => parseNames("start", list, TICTACTOE_STARTS);

export interface StepScenarios {
  /** The run's seed. */
  seed: number;
  groupsPerStep: number;
  groupSize: number;
  /** Tic-tac-toe opponents, one per group in turn (default: random). */
  opponents?: readonly TicTacToeOpponentName[];
  /** Where tic-tac-toe games start, one per group in turn (default: empty). */
  starts?: readonly TicTacToeStart[];
  /** Tic-tac-toe's reward for the decisions themselves (default 0: the outcome alone). */
  decisionReward?: number;
  /** Exploration (GameScenario.explore; default 0: every move or answer the model's pick). */
  explore?: number;
  /** Tic-tac-toe: each training move sampled among the legal ones (default false). */
  legalMoves?: boolean;
  /**
   * "shared" (default): a group's rollouts all play one scenario, so they differ only where the model's samples do.
   * "independent": every rollout plays its own scenario, as ART's tic-tac-toe example gathers its games; the group
   * is then a batch of games whose mean is the baseline.
   */
  scenarios?: "shared" | "independent";
}

/**
 * The scenarios of training step `step` (0-based): `groupsPerStep` groups of `groupSize` rollouts of one scenario
 * each, with the opponents and the starts taken in turn by group. `groups` picks other groups of the step: the
 * `count` from index `from` (a step that draws more groups than `groupsPerStep`; each index is its own scenario).
 */
export function stepScenarios(
  step: number,
  s: StepScenarios,
  groups: { from: number; count: number } = { from: 0, count: s.groupsPerStep },
): GameScenario[][] {
  const opponents = s.opponents?.length ? s.opponents : (["random"] as const);
  const starts = s.starts?.length ? s.starts : (["empty"] as const);
  const independent = s.scenarios === "independent";
  const end = groups.from + groups.count;
  if ((independent ? end * s.groupSize : end) > 1000)
    throw new Error(
      independent
        ? `independent scenarios: ${end} groups x ${s.groupSize} rollouts is over 1000 games a step (the scenario seed's room)`
        : `${end} groups is over 1000 a step (the scenario seed's room)`,
    );
  return Array.from({ length: groups.count }, (_, k) => groups.from + k).map((g) =>
    Array.from({ length: s.groupSize }, (_, i) => ({
      seed: trainingScenarioSeed(s.seed, step, independent ? g * s.groupSize + i : g),
      opponent: opponents[g % opponents.length],
      ...(starts[g % starts.length] === "empty" ? {} : { start: starts[g % starts.length] }),
      ...(s.decisionReward ? { decisionReward: s.decisionReward } : {}),
      ...(s.explore ? { explore: s.explore } : {}),
      ...(s.legalMoves ? { legalMoves: true } : {}),
    })),
  );
}
