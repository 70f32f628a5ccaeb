// Watch the run's latest checkpoint play 2048, a move at a time: it sees exactly what it saw in training (the system
// prompt and the current board alone, as HISTORY_TURNS_2048 keeps it) and answers <move>…</move>.
import { useState } from "react";
import { maxTile, new2048, parse2048Move, render2048, step2048, system2048Prompt, type Game2048 } from "webart/envs";
import { engine } from "../engine.ts";
import { Board2048 } from "./Boards.tsx";

export function Play2048(props: { run: string | null; maxTokens: number }) {
  const [game, setGame] = useState<Game2048 | null>(null);
  const [thinking, setThinking] = useState(false);
  const [log, setLog] = useState<string[]>([]);
  const [error, setError] = useState<string | null>(null);

  const start = () => {
    setGame(new2048({ seed: Math.floor(Math.random() * 2 ** 31) }));
    setLog([]);
    setError(null);
  };

  /** Asks the model for up to `n` moves, stopping when the game ends. */
  const moves = async (n: number) => {
    if (!props.run || !game) return;
    setThinking(true);
    setError(null);
    try {
      for (let i = 0; i < n && game.outcome === null; i++) {
        const text = await engine().reply(
          props.run,
          [
            { role: "system", content: system2048Prompt(game.winningValue) },
            { role: "user", content: render2048(game.board) },
          ],
          props.maxTokens,
        );
        const dir = parse2048Move(text);
        step2048(game, text);
        const line = `${dir ?? "no move"} ← ${JSON.stringify(text)}`;
        setLog((l) => [...l.slice(-49), line]);
        setGame({ ...game, board: [...game.board] });
      }
    } catch (e) {
      setError(`The model could not answer: ${(e as Error).message}`);
    } finally {
      setThinking(false);
    }
  };

  if (!props.run) return <p className="muted">Start or open a run to watch its latest checkpoint play.</p>;
  return (
    <section aria-label="Watch the model play 2048" className="play">
      <p>
        <strong>{props.run}</strong> (latest checkpoint) plays 2048.
      </p>
      <div className="row wrap">
        <button type="button" disabled={thinking} onClick={start}>
          New game
        </button>
        <button type="button" disabled={!game || thinking || game.outcome !== null} onClick={() => void moves(1)}>
          Model's move
        </button>
        <button type="button" disabled={!game || thinking || game.outcome !== null} onClick={() => void moves(10)}>
          10 moves
        </button>
      </div>
      {game && (
        <div className="play-area">
          <Board2048 tiles={game.board} label="The model's game" />
          <div>
            <p data-testid="play-message" aria-live="polite">
              {thinking
                ? "The model is thinking…"
                : `Moves ${game.moves} · largest tile ${maxTile(game.board)}${game.outcome ? ` · game over: ${game.outcome}${game.error ? ` (${game.error})` : ""}` : ""}`}
            </p>
            {error && <p className="error">{error}</p>}
            <ol className="moves small" data-testid="play-moves">
              {log.map((l, i) => (
                <li key={i}>
                  <code>{l}</code>
                </li>
              ))}
            </ol>
          </div>
        </div>
      )}
    </section>
  );
}
