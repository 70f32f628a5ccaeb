// Replays a saved trajectory: pick a step, group and game; the board move by move beside the conversation (an
// agent with tools: each tool call with its arguments, each tool result), with the game's reward, its advantage in
// the group, and the RULER judge's explanation when there is one.
import { useEffect, useMemo, useState } from "react";
import type { EnvName, GroupView, MessageView, TrajectoryView } from "../api.ts";
import { engine } from "../engine.ts";
import { parseBoard, type Board } from "../lib/boards.ts";
import { num, roleLabel } from "../lib/format.ts";
import { Board2048, TicTacToeBoard } from "./Boards.tsx";

interface Frame {
  board: Board | null;
  /** Index in `messages` of the board's user message and of the reply to it. */
  user: number;
  reply: number | null;
  history: number;
}

type Msg = MessageView;

/** Envs whose conversations are shown alone (no board to replay). */
const chatOnly = (env: EnvName) => env === "custom" || env === "email";

/** A message's body: its text, and an assistant turn's tool calls each with its arguments. */
export function MessageBody({ m }: { m: Msg }) {
  return (
    <>
      {m.content && <pre>{m.content}</pre>}
      {m.toolCalls?.map((c, i) => (
        <div key={i} className="tool-call" data-testid="tool-call">
          <code className="tool-name">{c.name}</code>
          <pre className="tool-args">{prettyArgs(c.arguments)}</pre>
        </div>
      ))}
    </>
  );
}

/** JSON arguments indented; anything else as the model wrote it. */
function prettyArgs(a: string): string {
  try {
    return JSON.stringify(JSON.parse(a), null, 1);
  } catch {
    return a;
  }
}

/** One frame per board the model saw, then the final position from the game's log. */
function framesOf(env: EnvName, t: TrajectoryView): { frames: Frame[]; histories: Msg[][] } {
  const histories = [t.messages, ...t.extraHistories];
  const frames: Frame[] = [];
  histories.forEach((h, hi) =>
    h.forEach((m, i) => {
      if (m.role !== "user") return;
      frames.push({
        board: parseBoard(env, m.content),
        user: i,
        reply: h[i + 1]?.role === "assistant" ? i + 1 : null,
        history: hi,
      });
    }),
  );
  const final = t.logs[0] ? parseBoard(env, t.logs[0]) : null;
  if (final) frames.push({ board: final, user: -1, reply: null, history: -1 });
  return { frames, histories };
}

function BoardView({ board, label }: { board: Board | null; label: string }) {
  if (!board) return <p className="muted">No board in this message.</p>;
  return board.kind === "tictactoe" ? (
    <TicTacToeBoard cells={board.cells} label={label} />
  ) : (
    <Board2048 tiles={board.tiles} label={label} />
  );
}

export function RolloutViewer(props: { run: string | null; env: EnvName; version: number }) {
  const [steps, setSteps] = useState<number[]>([]);
  const [step, setStep] = useState<number | null>(null);
  const [groups, setGroups] = useState<GroupView[]>([]);
  const [g, setG] = useState(0);
  const [t, setT] = useState(0);
  const [frame, setFrame] = useState(0);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!props.run) return;
    let live = true;
    engine()
      .trajectorySteps(props.run)
      .then(
        (s) => {
          if (!live) return;
          setSteps(s);
          setStep((cur) => (cur !== null && s.includes(cur) ? cur : (s[s.length - 1] ?? null)));
        },
        (e: Error) => setError(e.message),
      );
    return () => void (live = false);
  }, [props.run, props.version]);

  useEffect(() => {
    if (!props.run || step === null) return setGroups([]);
    let live = true;
    engine()
      .trajectories(props.run, step)
      .then(
        (gs) => {
          if (!live) return;
          setGroups(gs);
          setG(0);
          setT(0);
          setFrame(0);
          setError(null);
        },
        (e: Error) => setError(e.message),
      );
    return () => void (live = false);
  }, [props.run, step]);

  const traj = groups[g]?.trajectories[t] ?? null;
  const { frames, histories } = useMemo(
    () => (traj ? framesOf(props.env, traj) : { frames: [], histories: [] }),
    [traj, props.env],
  );
  const f = frames[Math.min(frame, frames.length - 1)];
  const ruler = traj?.logs.find((l) => l.startsWith("RULER score"));
  const notes = typeof traj?.metadata?.notes === "string" ? traj.metadata.notes : null;

  if (!props.run) return <p className="muted">Start or open a run to see its games.</p>;
  return (
    <section aria-label="Rollout viewer" className="viewer">
      <div className="row wrap pickers">
        <label>
          Step{" "}
          <select
            aria-label="Step"
            value={step ?? ""}
            onChange={(e) => setStep(Number(e.target.value))}
            disabled={!steps.length}
          >
            {steps.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Group{" "}
          <select aria-label="Group" value={g} onChange={(e) => (setG(Number(e.target.value)), setT(0), setFrame(0))}>
            {groups.map((_, i) => (
              <option key={i} value={i}>
                {i + 1}
              </option>
            ))}
          </select>
        </label>
        <label>
          {props.env === "custom" ? "Rollout" : props.env === "email" ? "Episode" : "Game"}{" "}
          <select aria-label="Trajectory" value={t} onChange={(e) => (setT(Number(e.target.value)), setFrame(0))}>
            {(groups[g]?.trajectories ?? []).map((x, i) => (
              <option key={i} value={i}>
                {i + 1} (reward {num(x.reward)})
              </option>
            ))}
          </select>
        </label>
      </div>
      {error && <p className="error">{error}</p>}
      {!steps.length && <p className="muted">No step has finished yet.</p>}
      {traj && (
        <>
          <p className="traj-meta" data-testid="traj-meta">
            Reward <strong>{num(traj.reward)}</strong> · advantage <strong>{num(traj.advantage)}</strong> ·{" "}
            {Object.entries(traj.metrics)
              .filter(([k]) => k !== "duration")
              .map(([k, v]) => `${k} ${typeof v === "number" ? num(v) : String(v)}`)
              .join(", ")}
          </p>
          {ruler && <p className="ruler-note">{ruler}</p>}
          {notes && <pre className="muted small">{notes}</pre>}
          <div className={chatOnly(props.env) ? "replay chat-only" : "replay"}>
            {!chatOnly(props.env) && (
              <div className="replay-board">
                <BoardView board={f?.board ?? null} label={`Board at move ${frame + 1}`} />
                <div className="row">
                  <button
                    type="button"
                    onClick={() => setFrame(Math.max(0, frame - 1))}
                    disabled={frame === 0}
                    aria-label="Previous move"
                  >
                    ◀ Prev
                  </button>
                  <span data-testid="move-counter">
                    {Math.min(frame + 1, frames.length)} / {frames.length}
                  </span>
                  <button
                    type="button"
                    onClick={() => setFrame(Math.min(frames.length - 1, frame + 1))}
                    disabled={frame >= frames.length - 1}
                    aria-label="Next move"
                  >
                    Next ▶
                  </button>
                </div>
                <input
                  type="range"
                  aria-label="Move"
                  min={0}
                  max={Math.max(0, frames.length - 1)}
                  value={frame}
                  onChange={(e) => setFrame(Number(e.target.value))}
                />
                {f && f.user < 0 && <p className="muted small">Final position: {traj.logs[0]?.split("\n").pop()}</p>}
              </div>
            )}
            <ol className="conversation" aria-label="Conversation">
              {histories.flatMap((h, hi) =>
                h.map((m, i) => {
                  if (hi > 0 && m.role === "system") return null; // 2048 repeats it in every move's history
                  const current = f && f.history === hi && (i === f.user || i === f.reply);
                  // A custom task's user turns after an assistant reply are the simulated user's.
                  const simulated = props.env === "custom" && m.role === "user" && h[i - 1]?.role === "assistant";
                  return (
                    <li
                      key={`${hi}-${i}`}
                      className={`msg ${m.role}${simulated ? " simulated" : ""}${current ? " current" : ""}`}
                      aria-current={current ? "step" : undefined}
                    >
                      <span className="role">{simulated ? "user (simulated)" : roleLabel(m)}</span>
                      <MessageBody m={m} />
                    </li>
                  );
                }),
              )}
            </ol>
          </div>
          {groups[g]?.exceptions.length ? (
            <p className="error">Failed rollouts in this group: {groups[g].exceptions.join("; ")}</p>
          ) : null}
        </>
      )}
    </section>
  );
}
