// Tic-tac-toe rules: every end state, reply parsing, invalid moves, the random opponent and the first move.
import { describe, expect, it } from "vitest";
import {
  blockingOpponent,
  cellName,
  completingCell,
  lineWinner,
  newTicTacToe,
  other,
  parseTicTacToeMove,
  renderTicTacToe,
  ticTacToeReward,
  ticTacToeEnv,
  ticTacToeStep,
  type Cell,
  type Mark,
  type Opponent,
  type TicTacToeGame,
  winningOpponent,
} from "./tictactoe.ts";
import { Rng } from "@webart/gpu";

const LINES = [
  ...[0, 1, 2].map((r) => [3 * r, 3 * r + 1, 3 * r + 2]),
  ...[0, 1, 2].map((c) => [c, c + 3, c + 6]),
  [0, 4, 8],
  [2, 4, 6],
];
const idx = (row: string, col: number) => "ABC".indexOf(row) * 3 + col - 1;
const reply = (cell: number) => `<move>${cellName(cell)}</move>`;

/** A game in a given position with an opponent that plays the listed cells in order. */
function position(agent: Mark, board: Cell[], opponentCells: number[] = []): TicTacToeGame {
  const queue = [...opponentCells];
  const opponent: Opponent = () => queue.shift() ?? -1;
  return { ...newTicTacToe({ seed: 1, agent: "x" }), agent, board: board.slice(), opponent };
}

describe("tic-tac-toe decision openings", () => {
  it("start the agent, to move, where either side has a line to complete, after legal alternating moves", () => {
    const agents = new Set<Mark>();
    for (let seed = 0; seed < 200; seed++) {
      const g = newTicTacToe({ seed, start: "decision" });
      agents.add(g.agent);
      const xs = g.board.filter((c) => c === "x").length;
      const os = g.board.filter((c) => c === "o").length;
      expect(xs - os).toBe(g.agent === "x" ? 0 : 1); // x moved first, and it is the agent's turn
      expect(lineWinner(g.board)).toBeNull();
      expect(completingCell(g.board, "x") >= 0 || completingCell(g.board, "o") >= 0).toBe(true);
      // The agent's own opening moves, each on the board it was shown, are on the final board.
      expect(g.opening.length).toBe(g.board.filter((c) => c === g.agent).length);
      for (const t of g.opening) {
        const cell = parseTicTacToeMove(t.reply)!;
        expect(g.board[cell]).toBe(g.agent);
        // ... and each is the first empty cell of the board it was made on (the transcripts' player's habit).
        const shown = t.board
          .split("\n")
          .slice(1)
          .flatMap((row) => row.slice(2).split(" "));
        expect(cell).toBe(shown.indexOf("."));
      }
      expect(newTicTacToe({ seed, start: "decision" }).board).toEqual(g.board); // seeded
    }
    expect([...agents].sort()).toEqual(["o", "x"]);
    expect(ticTacToeEnv.prelude!(newTicTacToe({ seed: 1 }))).toEqual([]); // an empty start has no opening
  });
});

describe("tic-tac-toe end states", () => {
  for (const mark of ["x", "o"] as const)
    it(`lineWinner finds all 8 lines for ${mark}`, () => {
      for (const line of LINES) {
        const board: Cell[] = Array(9).fill(null);
        for (const c of line) board[c] = mark;
        // A stray opponent mark elsewhere must not matter.
        const free = board.findIndex((c) => c === null);
        board[free] = other(mark);
        expect(lineWinner(board)).toBe(mark);
        board[line[1]] = other(mark);
        expect(lineWinner(board)).not.toBe(mark);
      }
    });

  it("the agent completing any line wins (reward 1), for both symbols", () => {
    for (const agent of ["x", "o"] as const)
      for (const line of LINES) {
        const board: Cell[] = Array(9).fill(null);
        board[line[0]] = board[line[1]] = agent;
        const g = position(agent, board);
        ticTacToeStep(g, reply(line[2]));
        expect(g.outcome).toBe("win");
        expect(ticTacToeReward(g)).toBe(1);
      }
  });

  it("the opponent completing any line is a loss (reward 0), for both symbols", () => {
    for (const agent of ["x", "o"] as const)
      for (const line of LINES) {
        const board: Cell[] = Array(9).fill(null);
        board[line[0]] = board[line[1]] = other(agent);
        const agentCell = [0, 1, 2, 3, 4, 5, 6, 7, 8].find((c) => !line.includes(c) && board[c] === null)!;
        const g = position(agent, board, [line[2]]);
        ticTacToeStep(g, reply(agentCell));
        expect(g.outcome).toBe("loss");
        expect(ticTacToeReward(g)).toBe(0);
      }
  });

  it("a full board without a line is a draw (reward 0.5), filled by the agent or by the opponent", () => {
    // x o x / x o o / o x _ : the last cell (C3) completes no line for either mark.
    const board: Cell[] = ["x", "o", "x", "x", "o", "o", "o", "x", null];
    for (const m of ["x", "o"] as const) {
      const filled = board.slice();
      filled[8] = m;
      expect(lineWinner(filled)).toBeNull();
    }
    const byAgent = position("x", board);
    ticTacToeStep(byAgent, reply(8));
    expect(byAgent.outcome).toBe("draw");
    expect(ticTacToeReward(byAgent)).toBe(0.5);

    // Two cells left: the agent takes one, the opponent fills the board.
    const two: Cell[] = ["x", "o", "x", "x", "o", "o", "o", null, null];
    const byOpponent = position("o", two, [7]);
    ticTacToeStep(byOpponent, reply(8));
    expect(byOpponent.board.every((c) => c !== null)).toBe(true);
    expect(lineWinner(byOpponent.board)).toBeNull();
    expect(byOpponent.outcome).toBe("draw");
  });

  it("a winning move that fills the board is a win, not a draw", () => {
    // x o x / o x o / o x _ : x at C3 completes the diagonal.
    const g = position("x", ["x", "o", "x", "o", "x", "o", "o", "x", null]);
    ticTacToeStep(g, reply(8));
    expect(g.outcome).toBe("win");
  });

  it("a game in progress has no outcome and refuses steps once over", () => {
    const g = newTicTacToe({ seed: 3, agent: "x" });
    ticTacToeStep(g, reply(4));
    expect(g.outcome).toBeNull();
    expect(g.board.filter((c) => c !== null).length).toBe(2);
    g.outcome = "win";
    expect(() => ticTacToeStep(g, reply(0))).toThrow(/game is over/);
  });
});

describe("tic-tac-toe parsing", () => {
  it("reads every cell, in any case and spacing, with text around the tags", () => {
    for (const row of "ABC")
      for (const col of [1, 2, 3]) {
        const want = idx(row, col);
        expect(cellName(want)).toBe(`${row}${col}`);
        for (const text of [
          `<move>${row}${col}</move>`,
          `<move>${row.toLowerCase()}${col}</move>`,
          `<MOVE>${row}${col}</Move>`,
          `<move> ${row} ${col} </move>`,
          `I will take ${row}${col}.\n<move>${row}${col}</move> good luck`,
        ])
          expect(parseTicTacToeMove(text)).toBe(want);
      }
  });

  it("takes the first move tag", () => {
    expect(parseTicTacToeMove("<move>A1</move><move>C3</move>")).toBe(idx("A", 1));
  });

  it("rejects missing tags, out-of-range cells and extra text inside the tag", () => {
    for (const text of [
      "B2",
      "<move>B2",
      "B2</move>",
      "<move></move>",
      "<move>D1</move>",
      "<move>A4</move>",
      "<move>A0</move>",
      "<move>B22</move>",
      "<move>2B</move>",
      "<move>B2 please</move>",
      "<mov>B2</mov>",
      "",
    ])
      expect(parseTicTacToeMove(text), text).toBeNull();
  });
});

describe("tic-tac-toe invalid moves", () => {
  it("an occupied cell ends the game at -1 and leaves the board as it was", () => {
    for (const agent of ["x", "o"] as const) {
      const g = newTicTacToe({ seed: 5, agent });
      if (agent === "x") ticTacToeStep(g, reply(0));
      const taken = g.board.findIndex((c) => c !== null);
      const before = g.board.slice();
      ticTacToeStep(g, reply(taken));
      expect(g.outcome).toBe("invalid");
      expect(ticTacToeReward(g)).toBe(-1);
      expect(g.board).toEqual(before);
      expect(g.error).toMatch(/taken/);
    }
  });

  it("an unparseable reply ends the game at -1", () => {
    const g = newTicTacToe({ seed: 6 });
    ticTacToeStep(g, "I think the center is best");
    expect(g.outcome).toBe("invalid");
    expect(ticTacToeReward(g)).toBe(-1);
    expect(g.error).toMatch(/no move/);
  });
});

describe("tic-tac-toe setup", () => {
  it("the agent's symbol is random; as o the opponent (x) has moved first", () => {
    const seen = { x: 0, o: 0 };
    for (let seed = 0; seed < 200; seed++) {
      const g = newTicTacToe({ seed });
      seen[g.agent]++;
      const marks = g.board.filter((c) => c !== null);
      expect(marks).toEqual(g.agent === "o" ? ["x"] : []);
    }
    expect(seen.x).toBeGreaterThan(60);
    expect(seen.o).toBeGreaterThan(60);
  });

  it("the opponent plays uniformly random empty cells, replayable from the seed", () => {
    const counts = Array(9).fill(0);
    for (let seed = 0; seed < 900; seed++) counts[newTicTacToe({ seed, agent: "o" }).board.indexOf("x")]++;
    for (const c of counts) expect(Math.abs(c - 100)).toBeLessThan(40); // ~4 sigma for Binomial(900, 1/9)
    const a = newTicTacToe({ seed: 42, agent: "x" });
    const b = newTicTacToe({ seed: 42, agent: "x" });
    ticTacToeStep(a, reply(4));
    ticTacToeStep(b, reply(4));
    expect(a.board).toEqual(b.board);
  });

  it("renders a header and one labelled row per board row", () => {
    const board: Cell[] = ["x", null, "o", null, "x", null, null, null, "o"];
    const lines = renderTicTacToe(board).split("\n");
    expect(lines[0]).toBe("  1 2 3");
    expect(lines.slice(1).map((l) => l[0])).toEqual(["A", "B", "C"]);
    const cells = lines.slice(1).flatMap((l) => l.slice(2).split(" "));
    expect(cells).toEqual(board.map((c) => c ?? "."));
  });
});

describe("tic-tac-toe opponents for training", () => {
  const b = (s: string): Cell[] => [...s].map((c) => (c === "." ? null : (c as Mark)));
  it("completingCell finds the open cell of a two-in-a-line, or -1", () => {
    expect(completingCell(b("xx......."), "x")).toBe(2);
    expect(completingCell(b("x...x...."), "x")).toBe(8);
    expect(completingCell(b("..o.o...."), "o")).toBe(6);
    expect(completingCell(b("xxo......"), "x")).toBe(-1);
    expect(completingCell(b("xx......."), "o")).toBe(-1);
  });

  it("the winning opponent takes its win (never a block), else a random empty cell", () => {
    const rng = new Rng(3);
    // o to move: o can win at C3 (diagonal); x threatens A3.
    expect(winningOpponent(b("xxo.o...."), "o", rng)).toBe(6);
    const seen = new Set<number>();
    for (let i = 0; i < 200; i++) seen.add(winningOpponent(b("xx..o...."), "o", rng));
    expect([...seen].sort()).toEqual([2, 3, 5, 6, 7, 8]); // the block at A3 is only one of the random choices
  });

  it("the blocking opponent wins first, blocks second, else plays randomly", () => {
    const rng = new Rng(4);
    expect(blockingOpponent(b("xxo.o...."), "o", rng)).toBe(6);
    expect(blockingOpponent(b("xx..o...."), "o", rng)).toBe(2);
    const seen = new Set<number>();
    for (let i = 0; i < 200; i++) seen.add(blockingOpponent(b("x...o...."), "o", rng));
    expect(seen.size).toBe(7);
  });
});

describe("decisions", () => {
  // The opponent plays a fixed list of cells, so each position below is known.
  const scripted =
    (cells: number[]): Opponent =>
    () =>
      cells.shift()!;

  it("counts chances taken, threats blocked, and threats whose block is not the first empty cell", () => {
    // x A1, o B2; x C3, o A3: o threatens C1 (A3-B2-C1), and the first empty cell is A2.
    const g = newTicTacToe({
      seed: 1,
      agent: "x",
      opponent: scripted([idx("B", 2), idx("A", 3), idx("B", 1), idx("B", 3)]),
    });
    ticTacToeStep(g, reply(idx("A", 1))); // nothing at stake
    ticTacToeStep(g, reply(idx("C", 3))); // nothing at stake
    expect(g.decisions).toEqual({
      chances: 0,
      winsTaken: 0,
      threats: 0,
      blocks: 0,
      threatsOffFirst: 0,
      blocksOffFirst: 0,
    });
    ticTacToeStep(g, reply(idx("C", 1))); // blocks A3-B2-C1; o then plays B1
    expect(g.decisions).toMatchObject({ threats: 1, blocks: 1, threatsOffFirst: 1, blocksOffFirst: 1 });
    // x has C1 and C3 (C2 completes row C): a chance, which the agent misses (A2); o wins on B3.
    ticTacToeStep(g, reply(idx("A", 2)));
    expect(g.decisions).toMatchObject({ chances: 1, winsTaken: 0 });
    expect(g.outcome).toBe("loss");
  });

  it("counts an illegal reply at a chance as not taken, and the metrics carry every count", () => {
    const g = newTicTacToe({ seed: 1, agent: "x", opponent: scripted([idx("B", 1), idx("B", 2)]) });
    ticTacToeStep(g, reply(idx("A", 1)));
    ticTacToeStep(g, reply(idx("A", 2))); // x threatens A3; o's B1, B2 threaten B3
    expect(completingCell(g.board, "x")).toBe(idx("A", 3));
    ticTacToeStep(g, "<move>A1</move>"); // taken: invalid
    expect(g.outcome).toBe("invalid");
    expect(g.decisions).toMatchObject({ chances: 1, winsTaken: 0, threats: 0 });
    expect(ticTacToeEnv.metrics(g)).toMatchObject({ invalid: 1, chances: 1, winsTaken: 0, threats: 0, blocks: 0 });
  });

  it("decisionReward adds its weight times (right - missed) / faced to the outcome's reward, and nothing by default", () => {
    // The first test's game: a block made (right), then a chance missed, and the game lost: 0 + 0.5 x (1 - 1) / 2.
    const play = (decisionReward?: number) => {
      const g = newTicTacToe({
        seed: 1,
        agent: "x",
        decisionReward,
        opponent: scripted([idx("B", 2), idx("A", 3), idx("B", 1), idx("B", 3)]),
      });
      for (const m of [idx("A", 1), idx("C", 3), idx("C", 1), idx("A", 2)]) ticTacToeStep(g, reply(m));
      return g;
    };
    expect(ticTacToeReward(play())).toBe(0);
    expect(ticTacToeReward(play(0.5))).toBe(0);
    // The chance taken instead (C2 wins row C): 1 + 0.5 x (2 - 0) / 2.
    const won = play(0.5);
    won.outcome = null;
    won.board = ["x", null, "o", "o", "o", null, "x", null, "x"];
    won.decisions = { chances: 0, winsTaken: 0, threats: 1, blocks: 1, threatsOffFirst: 1, blocksOffFirst: 1 };
    ticTacToeStep(won, reply(idx("C", 2)));
    expect(won.outcome).toBe("win");
    expect(ticTacToeReward(won)).toBe(1.5);
    // An illegal reply at a chance misses it: -1 + 0.5 x (0 - 1) / 1.
    const bad = newTicTacToe({
      seed: 1,
      agent: "x",
      decisionReward: 0.5,
      opponent: scripted([idx("B", 1), idx("B", 2)]),
    });
    for (const m of [idx("A", 1), idx("A", 2), idx("A", 1)]) ticTacToeStep(bad, reply(m));
    expect(bad.outcome).toBe("invalid");
    expect(ticTacToeReward(bad)).toBe(-1.5);
    // A game with no decision gets the outcome alone.
    const none = newTicTacToe({ seed: 1, agent: "x", decisionReward: 0.5 });
    none.board = ["x", "o", "x", "x", "o", "o", "o", "x", null];
    ticTacToeStep(none, reply(8));
    expect(none.outcome).toBe("draw");
    expect(ticTacToeReward(none)).toBe(0.5);
    expect(() => newTicTacToe({ seed: 1, decisionReward: -1 })).toThrow(/decisionReward must be a number >= 0/);
  });
});
