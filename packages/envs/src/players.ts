// Baseline players: random legal movers for both games and a perfect (minimax) tic-tac-toe player.
// They answer in the same <move> format as the model, so one evaluation serves all.
import { Rng } from "@webart/gpu";
import type { Player } from "./types.ts";
import {
  blockingOpponent,
  cellName,
  emptyCells,
  lineWinner,
  other,
  type Cell,
  type Mark,
  type Opponent,
  randomOpponent,
  type TicTacToeGame,
  winningOpponent,
} from "./tictactoe.ts";
import { legalMoves, type Game2048 } from "./game2048.ts";

export const moveReply = (move: string): string => `<move>${move}</move>`;

export function randomTicTacToePlayer(seed: number): Player<TicTacToeGame> {
  const rng = new Rng(seed);
  return async (game) => {
    const empty = emptyCells(game.board);
    return moveReply(cellName(empty[rng.int(empty.length)]));
  };
}

export function random2048Player(seed: number): Player<Game2048> {
  const rng = new Rng(seed);
  return async (game) => {
    const moves = legalMoves(game.board);
    return moveReply(moves[rng.int(moves.length)]);
  };
}

/** Perfect play: the first cell (in A1..C3 order) with the best minimax value, preferring faster wins. */
export function minimaxMove(board: readonly Cell[], mark: Mark): number {
  let best = -1;
  let bestScore = -Infinity;
  for (const cell of emptyCells(board)) {
    const next = board.slice();
    next[cell] = mark;
    const score = -negamax(next, other(mark));
    if (score > bestScore) [best, bestScore] = [cell, score];
  }
  if (best < 0) throw new Error("minimaxMove: the board is full");
  return best;
}

export const minimaxOpponent: Opponent = (board, mark) => minimaxMove(board, mark);

/** The tic-tac-toe opponents by name, weakest first (evaluation is always against `random`). */
export const TICTACTOE_OPPONENTS = {
  random: randomOpponent,
  winning: winningOpponent,
  blocking: blockingOpponent,
  minimax: minimaxOpponent,
} as const satisfies Record<string, Opponent>;
export type TicTacToeOpponentName = keyof typeof TICTACTOE_OPPONENTS;

/** The registry name of an opponent, or "custom". */
export function opponentName(opponent: Opponent | undefined): string {
  if (opponent === undefined) return "random";
  return Object.entries(TICTACTOE_OPPONENTS).find(([, o]) => o === opponent)?.[0] ?? "custom";
}

export function minimaxTicTacToePlayer(): Player<TicTacToeGame> {
  return async (game) => moveReply(cellName(minimaxMove(game.board, game.agent)));
}

const memo = new Map<string, number>();

/** The value of the position for `toMove`: +(1 + empty cells) for a win (sooner is better), 0 for a draw. */
function negamax(board: Cell[], toMove: Mark): number {
  const key = board.map((c) => c ?? ".").join("") + toMove;
  const cached = memo.get(key);
  if (cached !== undefined) return cached;
  const empty = emptyCells(board);
  let value: number;
  if (lineWinner(board) !== null)
    value = -(1 + empty.length); // the previous mover completed a line
  else if (empty.length === 0) value = 0;
  else {
    value = -Infinity;
    for (const cell of empty) {
      board[cell] = toMove;
      value = Math.max(value, -negamax(board, other(toMove)));
      board[cell] = null;
    }
  }
  memo.set(key, value);
  return value;
}
