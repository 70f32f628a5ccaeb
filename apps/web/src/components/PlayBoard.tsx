// Play tic-tac-toe against the run's latest checkpoint: the model sees exactly what it saw in training
// (system prompt, every earlier board and its own replies, the current board) and answers <move>..</move>.
import { useState } from "react";
import {
  cellName,
  emptyCells,
  lineWinner,
  parseTicTacToeMove,
  renderTicTacToe,
  ticTacToeSystemPrompt,
  type Cell,
  type Mark,
} from "../lib/tictactoe.ts";
import { engine } from "../engine.ts";
import { TicTacToeBoard } from "./Boards.tsx";

type Msg = { role: "system" | "user" | "assistant"; content: string };

interface Game {
  cells: Cell[];
  person: Mark;
  /** (board shown to the model, its reply) for each model turn so far. */
  turns: [string, string][];
  over: string | null;
  last: number | null;
}

const other = (m: Mark): Mark => (m === "x" ? "o" : "x");

function outcome(cells: Cell[], person: Mark): string | null {
  const w = lineWinner(cells);
  if (w) return w === person ? "You win." : "The model wins.";
  return emptyCells(cells).length === 0 ? "Draw." : null;
}

export function PlayBoard(props: { run: string | null; maxTokens: number; disabled: string | null }) {
  const [game, setGame] = useState<Game | null>(null);
  const [thinking, setThinking] = useState(false);
  const [message, setMessage] = useState<string | null>(null);
  const [lastReply, setLastReply] = useState<string | null>(null);

  const modelTurn = async (g: Game): Promise<void> => {
    if (!props.run) return;
    const mark = other(g.person);
    const board = renderTicTacToe(g.cells);
    const prompt: Msg[] = [
      { role: "system", content: ticTacToeSystemPrompt(mark) },
      ...g.turns.flatMap(([b, r]): Msg[] => [
        { role: "user", content: b },
        { role: "assistant", content: r },
      ]),
      { role: "user", content: board },
    ];
    setThinking(true);
    try {
      const text = await engine().reply(props.run, prompt, props.maxTokens);
      setLastReply(text);
      const cell = parseTicTacToeMove(text);
      if (cell === null || g.cells[cell] !== null) {
        const why = cell === null ? "it names no cell in <move>…</move>" : `${cellName(cell)} is taken`;
        setMessage(`Invalid move from the model: ${JSON.stringify(text)} (${why}). You win by forfeit.`);
        setGame({ ...g, over: "The model made an invalid move." });
        return;
      }
      const cells = g.cells.slice();
      cells[cell] = mark;
      setMessage(`The model played ${cellName(cell)}.`);
      setGame({ ...g, cells, turns: [...g.turns, [board, text]], over: outcome(cells, g.person), last: cell });
    } catch (e) {
      setMessage(`The model could not answer: ${(e as Error).message}`);
    } finally {
      setThinking(false);
    }
  };

  const start = (person: Mark) => {
    const g: Game = { cells: Array<Cell>(9).fill(null), person, turns: [], over: null, last: null };
    setGame(g);
    setMessage(person === "x" ? "Your move: you are x." : "The model (x) moves first.");
    setLastReply(null);
    if (person === "o") void modelTurn(g);
  };

  const pick = (cell: number) => {
    if (!game || game.over || thinking) return;
    const cells = game.cells.slice();
    cells[cell] = game.person;
    const g = { ...game, cells, over: outcome(cells, game.person), last: cell };
    setGame(g);
    setMessage(`You played ${cellName(cell)}.`);
    if (!g.over) void modelTurn(g);
  };

  if (!props.run) return <p className="muted">Start or open a run to play against its latest checkpoint.</p>;
  return (
    <section aria-label="Play against the model" className="play">
      <p>
        Playing against <strong>{props.run}</strong> (latest checkpoint).
      </p>
      {props.disabled && <p className="muted">{props.disabled}</p>}
      <div className="row wrap">
        <button type="button" disabled={!!props.disabled || thinking} onClick={() => start("x")}>
          New game: I play x (first)
        </button>
        <button type="button" disabled={!!props.disabled || thinking} onClick={() => start("o")}>
          New game: I play o
        </button>
      </div>
      {game && (
        <div className="play-area">
          <TicTacToeBoard
            cells={game.cells}
            onPick={pick}
            disabled={!!game.over || thinking || !!props.disabled}
            highlight={game.last}
            label="Your game"
          />
          <div>
            <p
              data-testid="play-message"
              aria-live="polite"
              className={message?.startsWith("Invalid") ? "error" : undefined}
            >
              {thinking ? "The model is thinking…" : message}
            </p>
            {game.over && (
              <p data-testid="play-over">
                <strong>{game.over}</strong>
              </p>
            )}
            {lastReply !== null && (
              <p className="muted small">
                Model's last reply: <code data-testid="model-reply">{lastReply}</code>
              </p>
            )}
          </div>
        </div>
      )}
    </section>
  );
}
