// 2048 on a 4x4 board, as in ART's example: the agent answers <move>left|right|up|down</move>, a 2 (90%) or 4
// (10%) appears on a random empty cell after each move, and reaching the winning tile (default 64) wins.
//
// As in ART's code (apply_agent_move), only a reply without a direction is invalid: a move that changes nothing
// is a wasted turn, and a tile still spawns. The game ends at the winning tile, or when the board is full and
// stuck: no move changes it (2048's rule; ART stops at any full board), or the agent's move changed nothing on a
// full board, where no tile can spawn and the next turn would be the same.
import { Rng } from "@webart/gpu";
import { moveText } from "./parse.ts";
import type { Env } from "./episode.ts";

export type Direction = "left" | "right" | "up" | "down";
export const DIRECTIONS: readonly Direction[] = ["left", "right", "up", "down"];
export type Game2048Outcome = "win" | "stuck" | "invalid";

export const SIZE = 4;

export interface Game2048 {
  board: number[]; // SIZE*SIZE tile values, row-major, 0 = empty
  winningValue: number;
  rng: Rng; // tile spawning
  moves: number; // turns played (moves parsed), wasted ones included
  noops: number; // moves that changed nothing (a tile still spawned)
  outcome: Game2048Outcome | null; // stuck: the board is full and will not change
  error: string | null; // why the game ended as invalid, for the logs
}

export interface Game2048Options {
  seed: number;
  /** The tile that wins (a power of two, at least 8); default 64. */
  winningValue?: number;
}

/** A new game with two spawned tiles. */
export function new2048(opts: Game2048Options): Game2048 {
  const winningValue = opts.winningValue ?? 64;
  if (!(winningValue >= 8 && Number.isInteger(Math.log2(winningValue))))
    throw new Error(`2048: winningValue ${winningValue} must be a power of two, at least 8`);
  const game: Game2048 = {
    board: Array(SIZE * SIZE).fill(0),
    winningValue,
    rng: new Rng(opts.seed),
    moves: 0,
    noops: 0,
    outcome: null,
    error: null,
  };
  spawnTile(game.board, game.rng);
  spawnTile(game.board, game.rng);
  return game;
}

/** Slides one line toward its start; each tile merges at most once per move: [2,2,2,2] -> [4,4,0,0]. */
export function slideLine(line: readonly number[]): number[] {
  const tiles = line.filter((v) => v !== 0);
  const out: number[] = [];
  for (let i = 0; i < tiles.length; i++) {
    if (i + 1 < tiles.length && tiles[i] === tiles[i + 1]) out.push(2 * tiles[i++]);
    else out.push(tiles[i]);
  }
  while (out.length < line.length) out.push(0);
  return out;
}

/** The board after a move (without spawning). */
export function slide(board: readonly number[], dir: Direction): number[] {
  const out = Array<number>(SIZE * SIZE);
  for (let k = 0; k < SIZE; k++) {
    // The cells of row or column k, ordered from the side the tiles move toward.
    const idx = Array.from({ length: SIZE }, (_, j) => {
      if (dir === "left") return k * SIZE + j;
      if (dir === "right") return k * SIZE + SIZE - 1 - j;
      if (dir === "up") return j * SIZE + k;
      return (SIZE - 1 - j) * SIZE + k;
    });
    const moved = slideLine(idx.map((i) => board[i]));
    idx.forEach((i, j) => (out[i] = moved[j]));
  }
  return out;
}

/** The moves that change the board; empty when the game is stuck. */
export function legalMoves(board: readonly number[]): Direction[] {
  return DIRECTIONS.filter((d) => slide(board, d).some((v, i) => v !== board[i]));
}

/** Puts a 2 (90%) or a 4 (10%) on a uniformly random empty cell. */
export function spawnTile(board: number[], rng: Rng): void {
  const empty = board.flatMap((v, i) => (v === 0 ? [i] : []));
  if (empty.length === 0) return;
  const cell = empty[rng.int(empty.length)];
  board[cell] = rng.next() < 0.9 ? 2 : 4;
}

export const maxTile = (board: readonly number[]): number => Math.max(...board);
export const boardSum = (board: readonly number[]): number => board.reduce((a, b) => a + b, 0);

/** The direction in the reply's <move> tag (any case), or null. */
export function parse2048Move(reply: string): Direction | null {
  const text = moveText(reply)?.toLowerCase();
  return DIRECTIONS.find((d) => d === text) ?? null;
}

/** One row per line, cells joined by `|`, `_` for empty: `2|_|_|4`. (ART pads cells to equal width; we
 * don't, so every tile value is the same few tokens wherever it sits.) */
export function render2048(board: readonly number[]): string {
  const rows: string[] = [];
  for (let r = 0; r < SIZE; r++)
    rows.push(
      board
        .slice(r * SIZE, r * SIZE + SIZE)
        .map((v) => (v ? String(v) : "_"))
        .join("|"),
    );
  return rows.join("\n");
}

export function system2048Prompt(winningValue: number): string {
  return (
    `You play 2048. Each turn you see the board: rows of cells split by "|", "_" is empty. ` +
    `A move slides all tiles one way; two equal tiles that meet merge. Reach ${winningValue} to win. ` +
    `Answer with one move that changes the board, like <move>left</move> (left, right, up or down).`
  );
}

/**
 * The agent's turn: a reply with no direction ends the game as invalid; a move slides the board (perhaps not at
 * all) and spawns a tile. A move that changes nothing on a full board ends the game as stuck.
 */
export function step2048(game: Game2048, reply: string): void {
  if (game.outcome !== null) throw new Error(`2048: the game is over (${game.outcome}); start a new one`);
  const dir = parse2048Move(reply);
  if (dir === null) {
    game.outcome = "invalid";
    game.error = `no move in reply ${JSON.stringify(reply)}`;
    return;
  }
  const next = slide(game.board, dir);
  const changed = next.some((v, i) => v !== game.board[i]);
  game.board = next;
  game.moves++;
  if (!changed) game.noops++;
  if (maxTile(next) >= game.winningValue) {
    game.outcome = "win";
    return;
  }
  if (!changed && !next.includes(0)) {
    game.outcome = "stuck";
    game.error = `${dir} changes nothing on a full board`;
    return;
  }
  spawnTile(game.board, game.rng);
  if (legalMoves(game.board).length === 0) game.outcome = "stuck";
}

/**
 * ART's shaped reward: win 2, invalid -1, otherwise the largest tile's progress toward the winning tile on a
 * log2 scale (0 for a 2, 1 at the goal) plus 0.2 times the board sum's, measured against 16 winning tiles:
 *   (log2(max) - 1) / (log2(W) - 1) + 0.2 * (log2(sum) - 1) / (log2(16 W) - 1).
 */
export function reward2048(game: Game2048): number {
  if (game.outcome === "win") return 2;
  if (game.outcome === "invalid") return -1;
  const w = Math.log2(game.winningValue);
  return (Math.log2(maxTile(game.board)) - 1) / (w - 1) + (0.2 * (Math.log2(boardSum(game.board)) - 1)) / (w + 4 - 1);
}

export const env2048: Env<Game2048> = {
  name: "2048",
  system: (g) => system2048Prompt(g.winningValue),
  observe: (g) => render2048(g.board),
  step: step2048,
  done: (g) => g.outcome !== null,
  reward: reward2048,
  metrics: (g) => ({
    win: Number(g.outcome === "win"),
    invalid: Number(g.outcome === "invalid"),
    stuck: Number(g.outcome === "stuck"),
    maxTile: maxTile(g.board),
    boardSum: boardSum(g.board),
    moves: g.moves,
    noops: g.noops,
  }),
  describe: (g) => `${render2048(g.board)}\noutcome: ${g.outcome}${g.error ? ` (${g.error})` : ""}`,
};
