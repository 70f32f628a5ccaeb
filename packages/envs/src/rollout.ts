// Rollouts written as a user of the `openai` SDK would write them (any OpenAI-compatible endpoint, or the
// engine's client), plus the same games played by a `Player` (baselines), both giving a trajectory.
import type OpenAI from "openai";
import { playEpisode, toTrajectory, type Act } from "./episode.ts";
import { Rng } from "@webart/gpu";
import {
  cellName,
  emptyCells,
  newTicTacToe,
  ticTacToeEnv,
  type TicTacToeGame,
  type TicTacToeOptions,
} from "./tictactoe.ts";
import { env2048, new2048, type Game2048, type Game2048Options } from "./game2048.ts";
import { opponentName } from "./players.ts";
import type { Player, SamplingOptions, TrajectoryLike } from "./types.ts";

export type TicTacToeScenario = TicTacToeOptions;
export type Game2048Scenario = Game2048Options;

/**
 * How many earlier (board, move) pairs each 2048 prompt carries; 0 by default. A 2048 board is the whole state
 * (the game is Markov), and games run to ~100+ moves, so a growing conversation would outgrow a small model's
 * context and make each training sequence quadratic in the game length. Instead every move is its own short
 * history (system, board, choice): the first in `messagesAndChoices`, the rest in `additionalHistories`, all
 * trained with the game's reward, as ART does with `additional_histories`.
 */
export const HISTORY_TURNS_2048 = 0;

/**
 * Earlier (board, move) pairs in each tic-tac-toe prompt: the whole game by default (Infinity), one conversation
 * per game as in ART's example; 0 makes each move its own (system, board, move) history, like 2048's default.
 */
export const HISTORY_TURNS_TICTACTOE = Infinity;

/** One game of tic-tac-toe; every agent turn is a chat completion, kept as its `Choice`. */
/**
 * The scenario seed of group `group` at training step `step` of a run seeded `seed`: `webart train`, the web app and
 * any loop built on these rollouts draw the same games from the same seed.
 */
export function trainingScenarioSeed(seed: number, step: number, group: number): number {
  return seed * 1_000_003 + step * 1000 + group;
}

export async function rolloutTicTacToe(
  client: OpenAI,
  opts: SamplingOptions & { scenario: TicTacToeScenario; historyTurns?: number },
): Promise<TrajectoryLike> {
  const explore = opts.scenario.explore ?? 0;
  if (!(Number.isFinite(explore) && explore >= 0 && explore <= 1))
    throw new Error(`tic-tac-toe: explore must be a probability from 0 to 1 (got ${explore})`);
  // The draws are the game's own (the group's games share the scenario seed, and must explore apart).
  const rng = new Rng(opts.seed ?? Math.floor(Math.random() * 2 ** 31));
  const legal = opts.scenario.legalMoves ?? false;
  const act = chatAct(client, opts, (game: TicTacToeGame) => {
    const empty = emptyCells(game.board);
    if (explore && rng.next() < explore)
      return { guided_choice: [`<move>${cellName(empty[rng.int(empty.length)])}</move>`] };
    return legal ? { guided_choice: empty.map((c) => `<move>${cellName(c)}</move>`) } : undefined;
  });
  return runTicTacToe(opts.scenario, act, opts.historyTurns);
}

/** One game of 2048; see HISTORY_TURNS_2048 for how the context is kept bounded. */
export async function rollout2048(
  client: OpenAI,
  opts: SamplingOptions & { scenario: Game2048Scenario; historyTurns?: number },
): Promise<TrajectoryLike> {
  return run2048(opts.scenario, chatAct(client, opts), opts.historyTurns);
}

/** One game of tic-tac-toe played by a `Player` (replies become plain assistant messages). */
export async function playTicTacToe(
  player: Player<TicTacToeGame>,
  scenario: TicTacToeScenario,
  historyTurns?: number,
): Promise<TrajectoryLike> {
  return runTicTacToe(scenario, async (game, prompt) => ({ text: await player(game, prompt) }), historyTurns);
}

export async function play2048(
  player: Player<Game2048>,
  scenario: Game2048Scenario,
  historyTurns?: number,
): Promise<TrajectoryLike> {
  return run2048(scenario, async (game, prompt) => ({ text: await player(game, prompt) }), historyTurns);
}

/** A player that asks a chat model, for evaluating a model with the baselines' evaluation. */
export function chatPlayer(client: OpenAI, opts: SamplingOptions): Player<unknown> {
  const act = chatAct(client, opts);
  return async (game, conversation) => (await act(game, conversation)).text;
}

async function runTicTacToe(
  scenario: TicTacToeScenario,
  act: Act<TicTacToeGame>,
  historyTurns = HISTORY_TURNS_TICTACTOE,
): Promise<TrajectoryLike> {
  const game = newTicTacToe(scenario);
  const turns = await playEpisode(ticTacToeEnv, game, act, historyTurns);
  const opponent = opponentName(scenario.opponent);
  return toTrajectory(ticTacToeEnv, game, turns, {
    seed: scenario.seed,
    agent: game.agent,
    opponent,
    start: scenario.start ?? "empty",
    ...(scenario.decisionReward ? { decisionReward: scenario.decisionReward } : {}),
    ...(scenario.explore ? { explore: scenario.explore } : {}),
    ...(scenario.legalMoves ? { legalMoves: true } : {}),
    historyTurns: Number.isFinite(historyTurns) ? historyTurns : null, // null: the whole game
  });
}

async function run2048(scenario: Game2048Scenario, act: Act<Game2048>, historyTurns = HISTORY_TURNS_2048) {
  const game = new2048(scenario);
  const turns = await playEpisode(env2048, game, act, historyTurns);
  return toTrajectory(env2048, game, turns, {
    seed: scenario.seed,
    winningValue: game.winningValue,
    historyTurns: Number.isFinite(historyTurns) ? historyTurns : null, // null: the whole game
  });
}

/** `body`: extra request fields for a turn (e.g. guided_choice), from the game before the move. */
function chatAct<G>(
  client: OpenAI,
  { model, temperature, maxTokens, seed }: SamplingOptions,
  body?: (game: G) => Record<string, unknown> | undefined,
): Act<G> {
  let turn = 0;
  return async (game, prompt) => {
    const completion = await client.chat.completions.create({
      ...body?.(game),
      model,
      messages: prompt,
      temperature,
      max_completion_tokens: maxTokens,
      logprobs: true,
      // One seed per turn: the same seed on every turn would reuse each token position's uniform draw.
      ...(seed === undefined ? {} : { seed: turnSeed(seed, turn++) }),
    });
    const choice = completion.choices[0];
    if (!choice) throw new Error(`chat completion from model "${model}" has no choices`);
    return { text: choice.message.content ?? "", choice };
  };
}

/** The sampling seed of a game's turn: a 32-bit mix of the game's seed and the turn number. */
export function turnSeed(seed: number, turn: number): number {
  let h = Math.imul((seed >>> 0) ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(turn + 1, 0xc2b2ae35);
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  return ((h ^ (h >>> 15)) >>> 0) & 0x7fffffff;
}
