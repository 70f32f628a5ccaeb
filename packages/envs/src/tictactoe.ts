// Tic-tac-toe against a random opponent, as in ART's example: the agent's symbol is random (x moves first),
// it answers <move>B2</move>; win 1, draw 0.5, loss 0, and an unparseable reply or occupied cell ends the game at -1.
import { Rng } from "@webart/gpu";
import { moveText } from "./parse.ts";
import type { Env } from "./episode.ts";

export type Mark = "x" | "o";
export type Cell = Mark | null;
export type TicTacToeOutcome = "win" | "draw" | "loss" | "invalid";

/** An opponent policy: the index (0..8, row-major, A1 = 0, C3 = 8) of the empty cell it takes. */
export type Opponent = (board: readonly Cell[], mark: Mark, rng: Rng) => number;

export interface TicTacToeGame {
  board: Cell[]; // 9 cells, row-major: A1 A2 A3 B1 ... C3
  agent: Mark;
  opponent: Opponent;
  rng: Rng; // the opponent's randomness
  agentMoves: number;
  outcome: TicTacToeOutcome | null;
  /** Why the game ended as invalid, for the logs. */
  error: string | null;
  /** What the agent did where a move mattered (ticTacToeStep counts them; the game's metrics carry them). */
  decisions: TicTacToeDecisions;
  /**
   * The agent's moves of a scripted opening (`start: "decision"`), each with the board it was made on: the game's
   * conversation shows them as earlier turns, but the model did not sample them, so they are not trained.
   */
  opening: { board: string; reply: string }[];
  /** The weight of the agent's decisions in its reward (TicTacToeOptions.decisionReward; 0: the outcome alone). */
  decisionReward: number;
}

/**
 * Counts of the agent's decisions in one game. A chance: the agent could complete a line. A threat (no chance): the
 * opponent could, and only one cell stops it. "Off first": that cell is not the first empty cell in reading order,
 * which the pretraining transcripts' player otherwise plays, so taking it is the skill and not the habit.
 */
export interface TicTacToeDecisions {
  chances: number;
  winsTaken: number;
  threats: number;
  blocks: number;
  threatsOffFirst: number;
  blocksOffFirst: number;
}

export interface TicTacToeOptions {
  seed: number;
  /** The agent's symbol; random from the seed when omitted. */
  agent?: Mark;
  /** Default: a uniformly random empty cell. */
  opponent?: Opponent;
  /**
   * Where the game starts. "empty" (default): an empty board (x moves first). "decision": an opening is played
   * first, the opponent's moves random and the agent's the first empty cell (the pretraining transcripts' player's
   * habit, shown as the agent's earlier turns), until the agent faces a decision: a line of its own to complete or
   * the opponent's to block. A training curriculum that puts every game's first sampled move where a move matters,
   * on boards like the ones the agent's own games reach. Evaluation always starts empty.
   */
  start?: TicTacToeStart;
  /**
   * A training reward for the decisions themselves (default 0: the outcome alone). The reward adds
   * `decisionReward x (right - missed) / faced` over the agent's decisions (wins to take, threats to block; an
   * illegal reply misses), so a missed block is paid for even when the random opponent does not punish it. The
   * outcome's rates (win, draw, ...) and evaluation are unchanged.
   */
  decisionReward?: number;
  /**
   * Exploration for training (default 0): the probability that an agent move is a uniformly random empty cell
   * instead of the model's pick. The rollout asks the model for that move through `guided_choice` (vLLM's; webart's
   * server supports it), so the reply is still the model's own tokens with the model's logprobs; the server marks it
   * forced, and training takes it only when its game beats the group's mean (a better move than the model would have
   * sampled), never in the KL term (SampledChoice.forced). Evaluation never explores.
   */
  explore?: number;
  /**
   * Training among the legal moves (default false): each agent move is asked with a `guided_choice` of the empty
   * cells' replies, so the model samples from its own probabilities over the legal moves alone, and training takes
   * each token's logprob over the set it was drawn from (SampledChoice.token_allowed): lowering a bad move raises the
   * other legal ones, never an illegal reply. An exploration move (above) is forced instead. `webart eval` plays
   * freely unless asked for the same constraint (`--legal-moves`).
   */
  legalMoves?: boolean;
}

export const TICTACTOE_STARTS = ["empty", "decision"] as const;
export type TicTacToeStart = (typeof TICTACTOE_STARTS)[number];

const ROWS = "ABC";
// prettier-ignore
const LINES = [
  [0, 1, 2], [3, 4, 5], [6, 7, 8], // rows
  [0, 3, 6], [1, 4, 7], [2, 5, 8], // columns
  [0, 4, 8], [2, 4, 6], // diagonals
];

export const other = (m: Mark): Mark => (m === "x" ? "o" : "x");
export const cellName = (i: number): string => `${ROWS[Math.floor(i / 3)]}${(i % 3) + 1}`;
export const emptyCells = (board: readonly Cell[]): number[] => board.flatMap((c, i) => (c === null ? [i] : []));

export const randomOpponent: Opponent = (board, _mark, rng) => {
  const empty = emptyCells(board);
  return empty[rng.int(empty.length)];
};

/** The empty cell that would complete a line of `mark`'s (the first in A1..C3 order), or -1. */
export function completingCell(board: readonly Cell[], mark: Mark): number {
  for (const [a, b, c] of LINES) {
    const cells = [board[a], board[b], board[c]];
    if (cells.filter((x) => x === mark).length === 2 && cells.includes(null)) return [a, b, c][cells.indexOf(null)];
  }
  return -1;
}

/** Takes an immediate win when it has one, otherwise a random empty cell: leaving a threat open loses. */
export const winningOpponent: Opponent = (board, mark, rng) => {
  const win = completingCell(board, mark);
  return win >= 0 ? win : randomOpponent(board, mark, rng);
};

/** Takes an immediate win, else blocks the other side's, else a random empty cell. */
export const blockingOpponent: Opponent = (board, mark, rng) => {
  const win = completingCell(board, mark);
  if (win >= 0) return win;
  const block = completingCell(board, other(mark));
  return block >= 0 ? block : randomOpponent(board, mark, rng);
};

/** A new game; when the agent is o the opponent (x) has already made its first move. */
export function newTicTacToe(opts: TicTacToeOptions): TicTacToeGame {
  const rng = new Rng(opts.seed);
  const agent = opts.agent ?? (rng.int(2) === 0 ? "x" : "o");
  const game: TicTacToeGame = {
    board: Array<Cell>(9).fill(null),
    agent,
    opponent: opts.opponent ?? randomOpponent,
    rng,
    agentMoves: 0,
    decisions: { chances: 0, winsTaken: 0, threats: 0, blocks: 0, threatsOffFirst: 0, blocksOffFirst: 0 },
    outcome: null,
    error: null,
    opening: [],
    decisionReward: opts.decisionReward ?? 0,
  };
  if (!(Number.isFinite(game.decisionReward) && game.decisionReward >= 0))
    throw new Error(`tic-tac-toe: decisionReward must be a number >= 0 (got ${opts.decisionReward})`);
  if (opts.start === "decision") playDecisionOpening(game);
  else if (agent === "o") opponentMove(game);
  return game;
}

/**
 * From the empty board (x first), the opponent's random moves and the agent's first empty cell, until the agent is
 * to move and either side has a line to complete; an opening that ends the game first is drawn again.
 */
function playDecisionOpening(game: TicTacToeGame): void {
  for (let attempt = 0; attempt < 1000; attempt++) {
    const board = Array<Cell>(9).fill(null);
    const opening: TicTacToeGame["opening"] = [];
    let toMove: Mark = "x";
    while (lineWinner(board) === null && board.includes(null)) {
      if (toMove === game.agent && (completingCell(board, "x") >= 0 || completingCell(board, "o") >= 0)) {
        game.board = board;
        game.opening = opening;
        return;
      }
      const empty = emptyCells(board);
      const cell = toMove === game.agent ? empty[0] : empty[game.rng.int(empty.length)];
      if (toMove === game.agent)
        opening.push({ board: renderTicTacToe(board), reply: `<move>${cellName(cell)}</move>` });
      board[cell] = toMove;
      toMove = other(toMove);
    }
  }
  throw new Error("tic-tac-toe: no decision opening found in 1000 random games");
}

/** The mark that completed a line, if any. */
export function lineWinner(board: readonly Cell[]): Mark | null {
  for (const [a, b, c] of LINES)
    if (board[a] !== null && board[a] === board[b] && board[a] === board[c]) return board[a];
  return null;
}

/** The cell index named in the reply's <move> tag (row A-C, column 1-3, any case and spacing), or null. */
export function parseTicTacToeMove(reply: string): number | null {
  const text = moveText(reply);
  const m = text === null ? null : /^([abc])\s*([123])$/i.exec(text);
  return m ? ROWS.indexOf(m[1].toUpperCase()) * 3 + Number(m[2]) - 1 : null;
}

/** Header `  1 2 3`, then one line per row: `A x . o` (`.` is empty). */
export function renderTicTacToe(board: readonly Cell[]): string {
  const rows = [0, 1, 2].map(
    (r) =>
      `${ROWS[r]} ${board
        .slice(r * 3, r * 3 + 3)
        .map((c) => c ?? ".")
        .join(" ")}`,
  );
  return ["  1 2 3", ...rows].join("\n");
}

/**
 * One line: the embedded model's board reading is measured to be much slower to learn behind a longer system
 * prompt (models/README.md). The board's header and the move format are left to the board and the examples.
 */
export function ticTacToeSystemPrompt(agent: Mark): string {
  return `You play ${agent}.`;
}

/** The agent's turn: apply its reply, then (unless the game ended) the opponent's move. */
export function ticTacToeStep(game: TicTacToeGame, reply: string): void {
  if (game.outcome !== null) throw new Error(`tic-tac-toe: the game is over (${game.outcome}); start a new one`);
  const cell = parseTicTacToeMove(reply);
  countDecision(game, cell);
  if (cell === null || game.board[cell] !== null) {
    game.outcome = "invalid";
    game.error = cell === null ? `no move in reply ${JSON.stringify(reply)}` : `cell ${cellName(cell)} is taken`;
    return;
  }
  game.board[cell] = game.agent;
  game.agentMoves++;
  if (settle(game)) return;
  opponentMove(game);
  settle(game);
}

/** Counts the decision the agent faced before its move `cell` (null: no move; an illegal move counts as not taken). */
function countDecision(game: TicTacToeGame, cell: number | null): void {
  const d = game.decisions;
  const win = completingCell(game.board, game.agent);
  if (win >= 0) {
    d.chances++;
    d.winsTaken += Number(cell === win);
    return;
  }
  const block = completingCell(game.board, other(game.agent));
  if (block < 0) return;
  d.threats++;
  d.blocks += Number(cell === block);
  if (block !== emptyCells(game.board)[0]) {
    d.threatsOffFirst++;
    d.blocksOffFirst += Number(cell === block);
  }
}

/** The outcome's reward, plus the decisions' term when the game has a decisionReward. */
export function ticTacToeReward(game: TicTacToeGame): number {
  const outcome = { win: 1, draw: 0.5, loss: 0, invalid: -1 }[game.outcome ?? "loss"];
  const d = game.decisions;
  const faced = d.chances + d.threats;
  if (!game.decisionReward || faced === 0) return outcome;
  const right = d.winsTaken + d.blocks;
  return outcome + (game.decisionReward * (2 * right - faced)) / faced; // (right - missed) / faced
}

function opponentMove(game: TicTacToeGame): void {
  const mark = other(game.agent);
  const cell = game.opponent(game.board, mark, game.rng);
  if (!(cell >= 0 && cell < 9) || game.board[cell] !== null)
    throw new Error(`tic-tac-toe: the opponent chose cell ${cell}, which is not an empty cell (0..8)`);
  game.board[cell] = mark;
}

/** Sets the outcome when a line is complete or the board is full; true if the game ended. */
function settle(game: TicTacToeGame): boolean {
  const w = lineWinner(game.board);
  if (w !== null) game.outcome = w === game.agent ? "win" : "loss";
  else if (game.board.every((c) => c !== null)) game.outcome = "draw";
  return game.outcome !== null;
}

export const ticTacToeEnv: Env<TicTacToeGame> = {
  name: "tictactoe",
  system: (g) => ticTacToeSystemPrompt(g.agent),
  observe: (g) => renderTicTacToe(g.board),
  step: ticTacToeStep,
  done: (g) => g.outcome !== null,
  prelude: (g) => g.opening.map((t) => ({ observation: t.board, reply: t.reply })),
  reward: ticTacToeReward,
  metrics: (g) => ({
    win: Number(g.outcome === "win"),
    draw: Number(g.outcome === "draw"),
    loss: Number(g.outcome === "loss"),
    invalid: Number(g.outcome === "invalid"),
    moves: g.agentMoves,
    ...g.decisions,
  }),
  describe: (g) => `${renderTicTacToe(g.board)}\noutcome: ${g.outcome}${g.error ? ` (${g.error})` : ""}`,
};
