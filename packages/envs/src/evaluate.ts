// Evaluation: many seeded games by one player (a baseline, or a model through `chatPlayer`), summarized from
// the trajectories' metrics, so rollouts gathered elsewhere can be summarized the same way.
import { Rng } from "@webart/gpu";
import { play2048, playTicTacToe } from "./rollout.ts";
import type { Mark, Opponent, TicTacToeGame } from "./tictactoe.ts";
import type { Game2048 } from "./game2048.ts";
import type { Player, TrajectoryLike } from "./types.ts";

export interface EvaluateOptions {
  games: number;
  /** Game i is played with the i-th u32 of Rng(seed), so results replay exactly. */
  seed: number;
  /** Games in flight at once (a model served by a batching engine is faster with several); default 1. */
  concurrency?: number;
}

export interface TicTacToeEvaluation {
  games: number;
  win: number; // rates in [0, 1]
  draw: number;
  loss: number;
  invalid: number;
  /** Fraction of the agent's replies that were legal moves (an illegal or unparseable reply ends its game). */
  legalMoves: number;
  meanReward: number;
  /** Of the agent's chances to complete a line, the share it took (NaN: none met). */
  winTaken: number;
  /** Of the threats it faced (with no win of its own), the share it blocked. */
  blocked: number;
  /** The same, counting only threats whose blocking cell is not the first empty cell in reading order. */
  blockedOffFirst: number;
}

export interface Game2048Evaluation {
  games: number;
  win: number; // rates in [0, 1]
  invalid: number;
  stuck: number; // the board full and unchanging before winning
  meanMaxTile: number;
  /** Fraction of games by largest tile, e.g. { 32: 0.25, 64: 0.75 }. */
  maxTiles: Record<number, number>;
  meanMoves: number;
  /** Fraction of moves that changed nothing (wasted turns). */
  noopRate: number;
  meanReward: number;
}

export async function evaluateTicTacToe(
  player: Player<TicTacToeGame>,
  opts: EvaluateOptions & { agent?: Mark; opponent?: Opponent },
): Promise<TicTacToeEvaluation> {
  const { agent, opponent } = opts;
  return summarizeTicTacToe(await runGames(opts, (seed) => playTicTacToe(player, { seed, agent, opponent })));
}

export async function evaluate2048(
  player: Player<Game2048>,
  opts: EvaluateOptions & { winningValue?: number },
): Promise<Game2048Evaluation> {
  return summarize2048(await runGames(opts, (seed) => play2048(player, { seed, winningValue: opts.winningValue })));
}

export function summarizeTicTacToe(trajectories: TrajectoryLike[]): TicTacToeEvaluation {
  const n = trajectories.length;
  const legal = trajectories.reduce((s, t) => s + Number(t.metrics.moves), 0);
  const illegal = trajectories.reduce((s, t) => s + Number(t.metrics.invalid), 0);
  const total = (k: string) => trajectories.reduce((s, t) => s + Number(t.metrics[k] ?? 0), 0);
  const share = (part: string, of: string) => total(part) / total(of);
  return {
    games: n,
    win: mean(trajectories, (t) => Number(t.metrics.win)),
    draw: mean(trajectories, (t) => Number(t.metrics.draw)),
    loss: mean(trajectories, (t) => Number(t.metrics.loss)),
    invalid: mean(trajectories, (t) => Number(t.metrics.invalid)),
    legalMoves: legal / Math.max(1, legal + illegal),
    meanReward: mean(trajectories, (t) => t.reward),
    winTaken: share("winsTaken", "chances"),
    blocked: share("blocks", "threats"),
    blockedOffFirst: share("blocksOffFirst", "threatsOffFirst"),
  };
}

export function summarize2048(trajectories: TrajectoryLike[]): Game2048Evaluation {
  const maxTiles: Record<number, number> = {};
  for (const t of trajectories) {
    const tile = Number(t.metrics.maxTile);
    maxTiles[tile] = (maxTiles[tile] ?? 0) + 1 / trajectories.length;
  }
  return {
    games: trajectories.length,
    win: mean(trajectories, (t) => Number(t.metrics.win)),
    invalid: mean(trajectories, (t) => Number(t.metrics.invalid)),
    stuck: mean(trajectories, (t) => Number(t.metrics.stuck)),
    meanMaxTile: mean(trajectories, (t) => Number(t.metrics.maxTile)),
    maxTiles,
    meanMoves: mean(trajectories, (t) => Number(t.metrics.moves)),
    noopRate:
      trajectories.reduce((s, t) => s + Number(t.metrics.noops ?? 0), 0) /
      Math.max(
        1,
        trajectories.reduce((s, t) => s + Number(t.metrics.moves), 0),
      ),
    meanReward: mean(trajectories, (t) => t.reward),
  };
}

/** Plays `games` games with derived seeds, at most `concurrency` at once; results in game order. */
async function runGames(opts: EvaluateOptions, play: (seed: number) => Promise<TrajectoryLike>) {
  const rng = new Rng(opts.seed);
  const seeds = Array.from({ length: opts.games }, () => rng.nextU32());
  const out: TrajectoryLike[] = new Array(opts.games);
  let next = 0;
  const worker = async () => {
    while (next < seeds.length) {
      const i = next++;
      out[i] = await play(seeds[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(opts.concurrency ?? 1, opts.games)) }, worker));
  return out;
}

function mean(ts: TrajectoryLike[], f: (t: TrajectoryLike) => number): number {
  return ts.length ? ts.reduce((s, t) => s + f(t), 0) / ts.length : 0;
}
