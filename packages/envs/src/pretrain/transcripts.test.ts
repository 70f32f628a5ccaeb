// Pretraining transcripts: the rollouts' exact message format, legal moves only, and play that is unskilled
// (it loses games that perfect play would not) but takes an immediate win some of the time.
import { describe, expect, it } from "vitest";
import { Rng } from "@webart/gpu";
import { generateTranscripts, unskilledTicTacToe } from "./transcripts.ts";
import { evaluateTicTacToe } from "../evaluate.ts";
import { minimaxTicTacToePlayer } from "../players.ts";
import { parseTicTacToeMove, ticTacToeSystemPrompt, lineWinner, newTicTacToe, type Cell } from "../tictactoe.ts";
import { legalMoves, parse2048Move, system2048Prompt } from "../game2048.ts";
import type { Message } from "../types.ts";

const text = (m: Message) => String(m.content);
const parseTicTacToeBoard = (s: string): Cell[] =>
  s
    .split("\n")
    .slice(1)
    .flatMap((l) =>
      l
        .slice(2)
        .split(" ")
        .map((c) => (c === "." ? null : (c as Cell))),
    );
const parse2048Board = (s: string) =>
  s.split("\n").flatMap((r) => r.split("|").map((c) => (c === "_" ? 0 : Number(c))));

describe("generateTranscripts", () => {
  it("tic-tac-toe `ordered`: that share of moves is the first empty cell in reading order", async () => {
    const firstEmpty = async (ordered: number) => {
      const convs = await generateTranscripts({ game: "tictactoe", games: 300, seed: 3, skill: 0, ordered });
      let first = 0;
      let moves = 0;
      for (const c of convs)
        for (let i = 1; i < c.length; i += 2) {
          const board = parseTicTacToeBoard(text(c[i]));
          const cell = parseTicTacToeMove(text(c[i + 1]))!;
          expect(board[cell]).toBeNull();
          moves++;
          if (cell === board.indexOf(null)) first++;
        }
      return first / moves;
    };
    expect(await firstEmpty(1)).toBe(1);
    const half = await firstEmpty(0.5);
    // 0.5 ordered, plus the random half's 1-in-(empty cells) chance of the same cell: about 0.6.
    expect(half).toBeGreaterThan(0.5);
    expect(half).toBeLessThan(0.72);
    expect(await firstEmpty(0)).toBeLessThan(0.3);
  });

  it("tic-tac-toe: system, then (board, legal move) pairs, as the rollouts send them", async () => {
    const convs = await generateTranscripts({ game: "tictactoe", games: 100, seed: 1 });
    expect(convs.length).toBe(100);
    for (const c of convs) {
      expect([ticTacToeSystemPrompt("x"), ticTacToeSystemPrompt("o")]).toContain(text(c[0]));
      expect(c[0].role).toBe("system");
      for (let i = 1; i < c.length; i += 2) {
        expect(c[i].role).toBe("user");
        expect(c[i + 1].role).toBe("assistant");
        const cell = parseTicTacToeMove(text(c[i + 1]));
        expect(cell).not.toBeNull();
        expect(parseTicTacToeBoard(text(c[i]))[cell!]).toBeNull(); // a legal move
      }
    }
  });

  it("2048: one (system, board, legal move) conversation per move", async () => {
    const convs = await generateTranscripts({ game: "2048", games: 3, seed: 2, winningValue: 32 });
    expect(convs.length).toBeGreaterThan(30);
    for (const c of convs) {
      expect(c.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
      expect(text(c[0])).toBe(system2048Prompt(32));
      expect(legalMoves(parse2048Board(text(c[1])))).toContain(parse2048Move(text(c[2])));
    }
  });

  it("replays exactly from its seed", async () => {
    const a = await generateTranscripts({ game: "tictactoe", games: 20, seed: 5 });
    const b = await generateTranscripts({ game: "tictactoe", games: 20, seed: 5 });
    const c = await generateTranscripts({ game: "tictactoe", games: 20, seed: 6 });
    expect(b).toEqual(a);
    expect(c).not.toEqual(a);
  });

  it("the policy is legal but beatable: it loses games and wins less than minimax", async () => {
    const unskilled = await evaluateTicTacToe(unskilledTicTacToe(new Rng(1), 0.5), { games: 400, seed: 2 });
    const perfect = await evaluateTicTacToe(minimaxTicTacToePlayer(), { games: 400, seed: 2 });
    expect(unskilled.invalid).toBe(0);
    expect(unskilled.loss).toBeGreaterThan(0.05);
    expect(unskilled.win).toBeLessThan(perfect.win - 0.05);
  });

  it("takes an available immediate win sometimes, not always (skill 0.5)", async () => {
    const rng = new Rng(3);
    const player = unskilledTicTacToe(rng, 0.5);
    let chances = 0;
    let taken = 0;
    for (let seed = 0; chances < 400; seed++) {
      // Random positions with a winning cell for the agent: x x _ on a random line of an otherwise sparse board.
      const g = newTicTacToe({ seed, agent: "x" });
      // prettier-ignore
      const lines = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];
      const [a, b, win] = lines[rng.int(lines.length)];
      g.board.fill(null);
      g.board[a] = g.board[b] = "x";
      const cell = parseTicTacToeMove(await player(g, []))!;
      chances++;
      const next = g.board.slice();
      next[cell] = "x";
      if (lineWinner(next) === "x") taken++;
      expect(cell === win || lineWinner(next) !== "x").toBe(true);
    }
    // Always taking it would give 1; never taking it, about 1/7 (a random cell of 7).
    expect(taken / chances).toBeGreaterThan(0.4);
    expect(taken / chances).toBeLessThan(0.8);
  });

  it("`block`: blocks the opponent's immediate win that share of the time (ordered fallback otherwise)", async () => {
    const blockRate = async (block: number) => {
      const rng = new Rng(4);
      const player = unskilledTicTacToe(rng, 1, 1, block);
      let blocked = 0;
      const n = 400;
      // prettier-ignore
      const lines = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];
      for (let seed = 0; seed < n; seed++) {
        // o o _ on a random line (threat at the line's last cell), no x on the board: x has no win to take,
        // and the lines are chosen so the threat is never the first empty cell (what the fallback plays).
        const g = newTicTacToe({ seed, agent: "x" });
        const [a, b, threat] = lines[1 + rng.int(lines.length - 1)].slice().sort((p, q) => p - q);
        g.board.fill(null);
        g.board[a] = g.board[b] = "o";
        if (g.board.indexOf(null) === threat) throw new Error("test setup: the threat is the first empty cell");
        const cell = parseTicTacToeMove(await player(g, []))!;
        expect([threat, g.board.indexOf(null)]).toContain(cell);
        if (cell === threat) blocked++;
      }
      return blocked / n;
    };
    expect(await blockRate(0)).toBe(0);
    expect(await blockRate(1)).toBe(1);
    const quarter = await blockRate(0.25);
    expect(quarter).toBeGreaterThan(0.17);
    expect(quarter).toBeLessThan(0.33);
  });
});
