// Supervised pretraining data for the embedded model: games played by an unskilled but always-legal policy,
// as the exact chat messages the rollouts send, so a tiny model learns the format and the legal moves and
// leaves RL something to improve (it loses to perfect play and often to plain random play).
import { Rng } from "@webart/gpu";
import { emptyCells, lineWinner, cellName, other, type Mark, type TicTacToeGame } from "../tictactoe.ts";
import { legalMoves, slide, type Game2048 } from "../game2048.ts";
import { play2048, playTicTacToe } from "../rollout.ts";
import { moveReply } from "../players.ts";
import { isChoice, type Message, type Player, type TrajectoryLike } from "../types.ts";

export interface TranscriptOptions {
  game: "tictactoe" | "2048";
  games: number;
  seed: number;
  /** Chance that the policy plays its one "skilled" move when there is one (tic-tac-toe: an immediate win;
   * 2048: the move that empties the most cells); otherwise a uniformly random legal move. Default 0.5. */
  skill?: number;
  /** Tic-tac-toe: chance that a move (other than a skilled one) is the first empty cell in reading order
   * (A1, A2, ..., C3) rather than a uniformly random empty cell. Default 0. A target that is a function of the
   * board teaches a tiny model to read the board within a CPU budget; a uniformly random empty cell does not
   * (its best fit for hundreds of steps is the same distribution over all nine cells, whatever the board). */
  ordered?: number;
  /** Tic-tac-toe: chance that the policy blocks the opponent's immediate win when it has one (and did not take
   * a win of its own). Default 0. */
  block?: number;
  /** 2048's winning tile; default 64. */
  winningValue?: number;
  /** Earlier turns in each prompt, as in the rollouts (defaults: the whole game for tic-tac-toe, 0 for 2048). */
  historyTurns?: number;
}

/** Conversations (system, boards, moves); for 2048 one per move, as the rollouts present them. */
export async function generateTranscripts(opts: TranscriptOptions): Promise<Message[][]> {
  const rng = new Rng(opts.seed);
  const skill = opts.skill ?? 0.5;
  const out: Message[][] = [];
  for (let i = 0; i < opts.games; i++) {
    const seed = rng.nextU32();
    const t =
      opts.game === "tictactoe"
        ? await playTicTacToe(
            unskilledTicTacToe(rng, skill, opts.ordered ?? 0, opts.block ?? 0),
            { seed },
            opts.historyTurns,
          )
        : await play2048(unskilled2048(rng, skill), { seed, winningValue: opts.winningValue }, opts.historyTurns);
    out.push(...conversations(t));
  }
  return out;
}

export function unskilledTicTacToe(rng: Rng, skill: number, ordered = 0, block = 0): Player<TicTacToeGame> {
  return async (game) => {
    const empty = emptyCells(game.board);
    const completes = (mark: Mark) =>
      empty.filter((c) => {
        const next = game.board.slice();
        next[c] = mark;
        return lineWinner(next) === mark;
      });
    const winning = completes(game.agent);
    if (winning.length > 0 && rng.next() < skill) return moveReply(cellName(winning[rng.int(winning.length)]));
    if (block > 0) {
      const threats = completes(other(game.agent));
      if (threats.length > 0 && rng.next() < block) return moveReply(cellName(threats[rng.int(threats.length)]));
    }
    if (ordered > 0 && rng.next() < ordered) return moveReply(cellName(empty[0]));
    return moveReply(cellName(empty[rng.int(empty.length)]));
  };
}

export function unskilled2048(rng: Rng, skill: number): Player<Game2048> {
  return async (game) => {
    const moves = legalMoves(game.board);
    if (rng.next() < skill) {
      // Fewest tiles left = most merges; ties keep DIRECTIONS order.
      const tiles = (d: (typeof moves)[number]) => slide(game.board, d).filter((v) => v !== 0).length;
      return moveReply(moves.reduce((a, b) => (tiles(b) < tiles(a) ? b : a)));
    }
    return moveReply(moves[rng.int(moves.length)]);
  };
}

/** A trajectory's conversations as plain messages (players' replies are already assistant messages). */
function conversations(t: TrajectoryLike): Message[][] {
  return [t.messagesAndChoices, ...(t.additionalHistories ?? []).map((h) => h.messagesAndChoices)].map((h) =>
    h.map((m): Message => (isChoice(m) ? { role: "assistant", content: m.message.content ?? "" } : m)),
  );
}
