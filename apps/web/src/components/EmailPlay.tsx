// Ask the email agent about a generated inbox (one of the held-out ones training never sees): the inbox, its own
// question (graded as in training) or one of your own, and each side's episode, the latest checkpoint beside the
// base model, with every tool call and tool result.
import { useMemo, useState } from "react";
import { emailScenario } from "webart/envs";
import type { EmailPlayResult } from "../api.ts";
import { engine } from "../engine.ts";
import { roleLabel } from "../lib/format.ts";
import { MessageBody } from "./RolloutViewer.tsx";

function Episode(props: { title: string; id: string; r: EmailPlayResult | null }) {
  const r = props.r;
  return (
    <div className="chat-side">
      <h3>{props.title}</h3>
      {r && (
        <p data-testid={`email-outcome-${props.id}`}>
          {r.graded
            ? r.graded.correct
              ? "Right answer from the right email"
              : r.graded.rightMessage
                ? "The right email, but not its answer"
                : "Not the answer"
            : "Your question: no known answer to grade"}{" "}
          · {r.turns} {r.turns === 1 ? "turn" : "turns"}
          {r.ending && <> · {r.ending}</>}
        </p>
      )}
      <ol className="conversation" data-testid={`email-${props.id}`}>
        {(r?.messages ?? [])
          .filter((m) => m.role !== "system")
          .map((m, i) => (
            <li key={i} className={`msg ${m.role}`}>
              <span className="role">{roleLabel(m)}</span>
              <MessageBody m={m} />
            </li>
          ))}
      </ol>
    </div>
  );
}

export function EmailPlay(props: { run: string | null }) {
  const [index, setIndex] = useState(0);
  const scenario = useMemo(() => emailScenario("eval", index), [index]);
  const [question, setQuestion] = useState(scenario.question.text);
  const [sides, setSides] = useState<{ model: EmailPlayResult | null; base: EmailPlayResult | null }>({
    model: null,
    base: null,
  });
  const [thinking, setThinking] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const pick = (i: number) => {
    const next = Math.max(0, Math.floor(i) || 0);
    setIndex(next);
    setQuestion(emailScenario("eval", next).question.text);
    setSides({ model: null, base: null });
  };
  const ask = async () => {
    const run = props.run;
    if (!run || !question.trim()) return;
    setThinking(true);
    setError(null);
    setSides({ model: null, base: null });
    try {
      // One after the other: the adapter is switched off for the base model's episode only.
      const model = await engine().askEmail(run, index, question);
      setSides({ model, base: null });
      const base = await engine().askEmail(run, index, question, { base: true });
      setSides({ model, base });
    } catch (e) {
      setError(`The agent could not play: ${(e as Error).message}`);
    } finally {
      setThinking(false);
    }
  };

  if (!props.run) return <p className="muted">Start or open a run to ask its agent.</p>;
  const { inbox } = scenario;
  return (
    <section aria-label="Ask the email agent" className="play">
      <div className="row wrap">
        <label>
          Inbox{" "}
          <input
            aria-label="Inbox number"
            type="number"
            min={0}
            value={index}
            onChange={(e) => pick(Number(e.target.value))}
            disabled={thinking}
          />
        </label>
        <button type="button" onClick={() => pick(Math.floor(Math.random() * 10_000))} disabled={thinking}>
          Another inbox
        </button>
        <span className="muted small">
          {inbox.owner} · today {inbox.today} · {inbox.emails.length} emails (held out from training)
        </span>
      </div>
      <details>
        <summary>The inbox</summary>
        <ol className="inbox" data-testid="inbox">
          {[...inbox.emails].reverse().map((m) => (
            <li key={m.id}>
              <details>
                <summary>
                  <code>{m.id}</code> {m.date.slice(0, 10)} · {m.from.replace(/\s*<.*>$/, "")} · {m.subject}
                </summary>
                <pre>{m.body}</pre>
              </details>
            </li>
          ))}
        </ol>
      </details>
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          void ask();
        }}
      >
        <input
          aria-label="Question"
          value={question}
          onChange={(e) => setQuestion(e.target.value)}
          disabled={thinking}
        />
        <button type="submit" disabled={thinking || !question.trim()}>
          Ask
        </button>
      </form>
      {thinking && <p aria-live="polite">The agents are searching…</p>}
      {error && <p className="error">{error}</p>}
      <div className="chat-pair">
        <Episode title={`${props.run} (latest checkpoint)`} id="model" r={sides.model} />
        <Episode title="Base model (adapter off)" id="base" r={sides.base} />
      </div>
    </section>
  );
}
