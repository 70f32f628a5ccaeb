// 2048 rules: merges in every direction, game over, winning, wasted and invalid moves, seeded spawning and the reward.
import { describe, expect, it } from "vitest";
import { Rng } from "@webart/gpu";
import {
  DIRECTIONS,
  SIZE,
  boardSum,
  legalMoves,
  maxTile,
  new2048,
  parse2048Move,
  render2048,
  reward2048,
  slide,
  slideLine,
  spawnTile,
  step2048,
  env2048,
  type Direction,
  type Game2048,
} from "./game2048.ts";

// Lines as seen from the side the tiles move toward (0 = empty), and the result.
// prettier-ignore
const CASES: [number[], number[]][] = [
  [[2, 2, 2, 2], [4, 4, 0, 0]],
  [[2, 2, 4, 0], [4, 4, 0, 0]],
  [[4, 2, 2, 0], [4, 4, 0, 0]],
  [[2, 0, 2, 2], [4, 2, 0, 0]],
  [[4, 4, 8, 0], [8, 8, 0, 0]], // a merged tile does not merge again in the same move
  [[8, 8, 4, 4], [16, 8, 0, 0]],
  [[2, 0, 0, 2], [4, 0, 0, 0]],
  [[0, 0, 0, 2], [2, 0, 0, 0]],
  [[2, 4, 8, 16], [2, 4, 8, 16]],
  [[2, 4, 2, 4], [2, 4, 2, 4]],
  [[0, 0, 0, 0], [0, 0, 0, 0]],
];

/** The board cells of line k as seen from the side `dir` moves toward. */
function lineCells(dir: Direction, k: number): number[] {
  return Array.from({ length: SIZE }, (_, j) => {
    if (dir === "left") return k * SIZE + j;
    if (dir === "right") return k * SIZE + SIZE - 1 - j;
    if (dir === "up") return j * SIZE + k;
    return (SIZE - 1 - j) * SIZE + k;
  });
}

const game = (board: number[], winningValue = 2048, seed = 0): Game2048 => ({
  ...new2048({ seed, winningValue }),
  board: board.slice(),
});

describe("2048 merges", () => {
  it("slideLine follows the merge rules", () => {
    for (const [line, want] of CASES) expect(slideLine(line), String(line)).toEqual(want);
  });

  it("every direction applies the rules along its own lines, in every row or column", () => {
    for (const dir of DIRECTIONS)
      for (let k = 0; k < SIZE; k++)
        for (const [line, want] of CASES) {
          const board = Array(SIZE * SIZE).fill(0);
          lineCells(dir, k).forEach((c, j) => (board[c] = line[j]));
          const expected = Array(SIZE * SIZE).fill(0);
          lineCells(dir, k).forEach((c, j) => (expected[c] = want[j]));
          expect(slide(board, dir), `${dir} line ${k} ${line}`).toEqual(expected);
        }
  });

  it("directions agree with each other under mirroring and transposition on random boards", () => {
    const rng = new Rng(7);
    const mirror = (b: number[]) => b.map((_, i) => b[Math.floor(i / SIZE) * SIZE + SIZE - 1 - (i % SIZE)]);
    const transpose = (b: number[]) => b.map((_, i) => b[(i % SIZE) * SIZE + Math.floor(i / SIZE)]);
    for (let t = 0; t < 200; t++) {
      const b = Array.from({ length: SIZE * SIZE }, () => (rng.next() < 0.4 ? 0 : 2 ** (1 + rng.int(3))));
      expect(slide(b, "right")).toEqual(mirror(slide(mirror(b), "left")));
      expect(slide(b, "up")).toEqual(transpose(slide(transpose(b), "left")));
      expect(slide(b, "down")).toEqual(transpose(slide(transpose(b), "right")));
      expect(boardSum(slide(b, "up"))).toBe(boardSum(b)); // merging conserves the sum
    }
  });
});

describe("2048 game", () => {
  it("a new game has two tiles of 2 or 4", () => {
    for (let seed = 0; seed < 50; seed++) {
      const tiles = new2048({ seed }).board.filter((v) => v !== 0);
      expect(tiles.length).toBe(2);
      for (const v of tiles) expect([2, 4]).toContain(v);
    }
  });

  it("detects a stuck board (full, no equal neighbours) and a full board that can still merge", () => {
    const stuck = [2, 4, 2, 4, 4, 2, 4, 2, 2, 4, 2, 4, 4, 2, 4, 2];
    expect(legalMoves(stuck)).toEqual([]);
    const canMerge = stuck.slice();
    canMerge[0] = canMerge[1] = 8; // one horizontal pair
    expect(legalMoves(canMerge).sort()).toEqual(["left", "right"]);
  });

  it("a move that leaves no legal move ends the game as stuck, whatever tile spawns", () => {
    // Row 0 [2,2,8,16] slides left to [4,8,16,_]; the spawn fills the hole and nothing can move.
    const board = [2, 2, 8, 16, 16, 32, 8, 32, 32, 8, 16, 8, 8, 16, 32, 16];
    for (let seed = 0; seed < 20; seed++) {
      const g = game(board, 2048, seed);
      expect(legalMoves(g.board)).toContain("left");
      step2048(g, "<move>left</move>");
      expect(g.outcome).toBe("stuck");
      expect(legalMoves(g.board)).toEqual([]);
      const max = Math.log2(maxTile(g.board));
      const w = Math.log2(2048);
      expect(reward2048(g)).toBeCloseTo((max - 1) / (w - 1) + (0.2 * (Math.log2(boardSum(g.board)) - 1)) / (w + 3), 12);
    }
  });

  it("reaching the winning tile wins (reward 2); the same merge below the goal does not", () => {
    const board = [32, 32, 0, 0, ...Array(12).fill(0)];
    board[8] = 2;
    const won = game(board, 64);
    step2048(won, "<move>left</move>");
    expect(won.outcome).toBe("win");
    expect(reward2048(won)).toBe(2);
    const notYet = game(board, 128);
    step2048(notYet, "<move>left</move>");
    expect(notYet.outcome).toBeNull();
    expect(maxTile(notYet.board)).toBe(64);
  });

  it("an unparseable reply ends the game at -1; a move that changes nothing is a wasted turn (as in ART)", () => {
    const board = [2, 4, 0, 0, ...Array(12).fill(0)];
    const h = game(board);
    step2048(h, "left");
    expect(h.outcome).toBe("invalid");
    expect(reward2048(h)).toBe(-1);
    expect(h.board).toEqual(board);
    expect(() => step2048(h, "<move>right</move>")).toThrow(/game is over/);
    for (const bad of ["<move>sideways</move>", "<move>C2</move>", "<move>left</move Each</move>", ""]) {
      const b = game(board);
      step2048(b, bad);
      expect(b.outcome).toBe("invalid");
    }

    // Left changes nothing: the game goes on, one tile spawns, the turn counts as wasted.
    const g = game(board);
    step2048(g, "<move>left</move>");
    expect(g.outcome).toBeNull();
    expect(g.moves).toBe(1);
    expect(g.noops).toBe(1);
    const added = g.board.map((v, i) => v - board[i]).filter((d) => d !== 0);
    expect(added.length).toBe(1);
    expect(g.board.slice(0, 2)).toEqual([2, 4]);
    expect(env2048.metrics(g)).toMatchObject({ moves: 1, noops: 1, invalid: 0 });
  });

  it("a move that changes nothing on a full board ends the game as stuck; one that merges goes on", () => {
    // Full, with one horizontal pair (8, 8): up changes nothing, left merges.
    const board = [8, 8, 2, 4, 4, 2, 4, 2, 2, 4, 2, 4, 4, 2, 4, 2];
    const g = game(board, 2048);
    step2048(g, "<move>up</move>");
    expect(g.outcome).toBe("stuck");
    expect(g.board).toEqual(board);
    expect(reward2048(g)).toBeGreaterThan(0);
    const h = game(board, 2048);
    step2048(h, "<move>left</move>");
    expect(h.outcome).toBeNull();
    expect(h.noops).toBe(0);
    expect(h.board.slice(0, 4)).toEqual([16, 2, 4, h.board[3]]);
    expect([2, 4]).toContain(h.board[3]);
  });

  it("a valid move slides, then spawns exactly one tile", () => {
    const g = new2048({ seed: 11 });
    const move = legalMoves(g.board)[0];
    const slid = slide(g.board, move);
    step2048(g, `<move>${move}</move>`);
    const added = g.board.map((v, i) => v - slid[i]).filter((d) => d !== 0);
    expect(added.length).toBe(1);
    expect([2, 4]).toContain(added[0]);
    expect(g.moves).toBe(1);
  });

  it("the shaped reward grows with the largest tile and the sum and stays below the win's 2", () => {
    const g = game([2, 2, ...Array(14).fill(0)], 64);
    const r1 = reward2048(g);
    g.board[0] = 8;
    const r2 = reward2048(g);
    g.board[5] = 32;
    const r3 = reward2048(g);
    expect(r1).toBeGreaterThan(0);
    expect(r2).toBeGreaterThan(r1);
    expect(r3).toBeGreaterThan(r2);
    g.board = Array(16).fill(32);
    expect(reward2048(g)).toBeLessThan(2);
  });

  it("parses moves in any case with text around the tag", () => {
    for (const d of DIRECTIONS) {
      expect(parse2048Move(`<move>${d}</move>`)).toBe(d);
      expect(parse2048Move(`Merging. <MOVE> ${d.toUpperCase()} </MOVE>`)).toBe(d);
    }
    for (const text of ["left", "<move>north</move>", "<move>left right</move>", "<move></move>", "<move>left"])
      expect(parse2048Move(text), text).toBeNull();
  });

  it("renders rows of |-separated cells with _ for empty", () => {
    const board = [2, 0, 0, 4, 0, 128, 0, 0, 0, 0, 0, 0, 16, 0, 0, 2];
    const rows = render2048(board).split("\n");
    expect(rows.length).toBe(SIZE);
    expect(rows.flatMap((r) => r.split("|")).map((c) => (c === "_" ? 0 : Number(c)))).toEqual(board);
  });

  it("rejects a winning value that is not a power of two", () => {
    expect(() => new2048({ seed: 0, winningValue: 100 })).toThrow(/power of two/);
  });
});

describe("2048 spawning", () => {
  it("is replayable from the seed", () => {
    const play = (seed: number) => {
      const g = new2048({ seed });
      const boards = [g.board.slice()];
      while (g.outcome === null) {
        step2048(g, `<move>${legalMoves(g.board)[0]}</move>`);
        boards.push(g.board.slice());
      }
      return boards;
    };
    expect(play(5)).toEqual(play(5));
    expect(play(5)).not.toEqual(play(6));
  });

  it("puts a 2 with probability 0.9 and a 4 with 0.1 on a uniformly random empty cell", () => {
    const rng = new Rng(3);
    const n = 20000;
    let fours = 0;
    const cells = Array(SIZE * SIZE).fill(0);
    for (let i = 0; i < n; i++) {
      const board = Array(SIZE * SIZE).fill(0);
      board[0] = board[5] = 8; // two occupied cells are never chosen
      spawnTile(board, rng);
      const at = board.findIndex((v, j) => v !== 0 && j !== 0 && j !== 5);
      cells[at]++;
      if (board[at] === 4) fours++;
    }
    const sigma = Math.sqrt(n * 0.1 * 0.9);
    expect(Math.abs(fours - 0.1 * n)).toBeLessThan(4 * sigma);
    expect(cells[0] + cells[5]).toBe(0);
    const per = n / 14;
    for (const [j, c] of cells.entries())
      if (j !== 0 && j !== 5) expect(Math.abs(c - per)).toBeLessThan(4 * Math.sqrt(per));
  });
});
