// Baselines and evaluation: minimax is perfect, random players are legal, summaries are consistent and replayable.
import { describe, expect, it } from "vitest";
import { evaluate2048, evaluateTicTacToe } from "./evaluate.ts";
import {
  minimaxMove,
  minimaxOpponent,
  minimaxTicTacToePlayer,
  moveReply,
  random2048Player,
  randomTicTacToePlayer,
} from "./players.ts";
import { lineWinner, type Cell, type TicTacToeGame } from "./tictactoe.ts";
import type { Player } from "./types.ts";

describe("tic-tac-toe baselines", () => {
  it("minimax never loses against 500 random games, as x and as o", async () => {
    const r = await evaluateTicTacToe(minimaxTicTacToePlayer(), { games: 500, seed: 1 });
    expect(r.games).toBe(500);
    expect(r.loss).toBe(0);
    expect(r.invalid).toBe(0);
    expect(r.win).toBeGreaterThan(0.8);
    expect(r.win + r.draw).toBeCloseTo(1, 12);
    // It blocks every threat it can (a double threat counts as one missed) and takes its wins.
    expect(r.blocked).toBeGreaterThan(0.9);
    expect(r.blockedOffFirst).toBeGreaterThan(0.9);
    expect(r.winTaken).toBeGreaterThan(0.9);
  });

  it("minimax against itself always draws, for both symbols", async () => {
    for (const agent of ["x", "o"] as const) {
      const r = await evaluateTicTacToe(minimaxTicTacToePlayer(), {
        games: 4,
        seed: 2,
        agent,
        opponent: minimaxOpponent,
      });
      expect(r.draw).toBe(1);
    }
  });

  it("minimax takes an immediate win and blocks an immediate loss", () => {
    // x x _ / o o _ / _ _ _ : x to move wins at A3; o to move wins at B3.
    const board: Cell[] = ["x", "x", null, "o", "o", null, null, null, null];
    expect(minimaxMove(board, "x")).toBe(2);
    expect(minimaxMove(board, "o")).toBe(5);
    // x x _ / o _ _ / _ _ _ : o must block at A3.
    const block: Cell[] = ["x", "x", null, "o", null, null, null, null, null];
    const next = block.slice();
    next[minimaxMove(block, "o")] = "o";
    for (let c = 0; c < 9; c++) {
      if (next[c] !== null) continue;
      const after = next.slice();
      after[c] = "x";
      expect(lineWinner(after)).not.toBe("x");
    }
  });

  it("the random player is always legal, and loses some games that minimax would not", async () => {
    const r = await evaluateTicTacToe(randomTicTacToePlayer(3), { games: 300, seed: 4 });
    expect(r.invalid).toBe(0);
    expect(r.legalMoves).toBe(1);
    expect(r.win + r.draw + r.loss).toBeCloseTo(1, 12);
    expect(r.loss).toBeGreaterThan(0.1);
    expect(r.win).toBeGreaterThan(0.3);
    expect(r.meanReward).toBeCloseTo(r.win + 0.5 * r.draw, 12);
    // A random empty cell: wins and blocks at about one chance in the 2-6 empty cells.
    for (const rate of [r.winTaken, r.blocked, r.blockedOffFirst]) {
      expect(rate).toBeGreaterThan(0.1);
      expect(rate).toBeLessThan(0.6);
    }
  });

  it("the legal-move rate counts every legal reply and the one illegal reply that ends a game", async () => {
    // Always A1: legal once if A1 is still empty, then taken. Every game ends invalid after at most two
    // replies, at most one of them legal (fewer when the opponent, moving first, took A1).
    const alwaysA1: Player<TicTacToeGame> = async () => moveReply("A1");
    const r = await evaluateTicTacToe(alwaysA1, { games: 60, seed: 2 });
    expect(r.invalid).toBe(1);
    expect(r.legalMoves).toBeLessThanOrEqual(0.5);
    expect(r.legalMoves).toBeGreaterThan(0.4);
  });

  it("evaluation replays exactly from its seed and does not depend on concurrency", async () => {
    const opts = { games: 60, seed: 9 };
    const a = await evaluateTicTacToe(randomTicTacToePlayer(1), opts);
    const b = await evaluateTicTacToe(randomTicTacToePlayer(1), opts);
    expect(a).toEqual(b);
    const m1 = await evaluateTicTacToe(minimaxTicTacToePlayer(), opts);
    const m4 = await evaluateTicTacToe(minimaxTicTacToePlayer(), { ...opts, concurrency: 4 });
    expect(m4).toEqual(m1);
    const other = await evaluateTicTacToe(randomTicTacToePlayer(1), { games: 60, seed: 10 });
    expect(other).not.toEqual(a);
  });
});

describe("2048 baselines", () => {
  it("the random player is always legal and the summary is consistent", async () => {
    const r = await evaluate2048(random2048Player(5), { games: 30, seed: 6 });
    expect(r.games).toBe(30);
    expect(r.invalid).toBe(0);
    expect(r.win + r.stuck + r.invalid).toBeCloseTo(1, 12);
    const fractions = Object.entries(r.maxTiles);
    expect(fractions.reduce((s, [, f]) => s + f, 0)).toBeCloseTo(1, 12);
    expect(fractions.reduce((s, [tile, f]) => s + Number(tile) * f, 0)).toBeCloseTo(r.meanMaxTile, 9);
    for (const [tile] of fractions) expect(Number(tile)).toBeLessThanOrEqual(64);
    expect(r.win).toBeGreaterThan(0); // random play reaches 64 sometimes...
    expect(r.stuck).toBeGreaterThan(0); // ...and gets stuck sometimes
    expect(r.meanMoves).toBeGreaterThan(10);
  });

  it("a harder goal lowers the win rate of the same player on the same games", async () => {
    const easy = await evaluate2048(random2048Player(7), { games: 30, seed: 8, winningValue: 32 });
    const hard = await evaluate2048(random2048Player(7), { games: 30, seed: 8, winningValue: 256 });
    expect(easy.win).toBeGreaterThan(hard.win);
    expect(hard.meanMoves).toBeGreaterThan(easy.meanMoves);
  });
});
