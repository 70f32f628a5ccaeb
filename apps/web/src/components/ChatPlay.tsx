// Talk to a custom task's latest checkpoint beside the base model (the same weights with the adapter off): the
// same system prompt, each side keeping its own conversation.
import { useState } from "react";
import { engine } from "../engine.ts";

type Msg = { role: "system" | "user" | "assistant"; content: string };

export function ChatPlay(props: { run: string | null; systemPrompt: string; maxTokens: number }) {
  const [sides, setSides] = useState<{ model: Msg[]; base: Msg[] }>({ model: [], base: [] });
  const [text, setText] = useState("");
  const [thinking, setThinking] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const send = async () => {
    const run = props.run;
    if (!run || !text.trim()) return;
    const user: Msg = { role: "user", content: text.trim() };
    const system: Msg[] = props.systemPrompt ? [{ role: "system", content: props.systemPrompt }] : [];
    const next = { model: [...sides.model, user], base: [...sides.base, user] };
    setSides(next);
    setText("");
    setThinking(true);
    setError(null);
    try {
      // One after the other: the adapter is switched off for the base model's answer only.
      const mine = await engine().reply(run, [...system, ...next.model], props.maxTokens);
      const base = await engine().reply(run, [...system, ...next.base], props.maxTokens, { base: true });
      setSides({
        model: [...next.model, { role: "assistant", content: mine }],
        base: [...next.base, { role: "assistant", content: base }],
      });
    } catch (e) {
      setError(`The model could not answer: ${(e as Error).message}`);
    } finally {
      setThinking(false);
    }
  };

  if (!props.run) return <p className="muted">Start or open a run to talk to its latest checkpoint.</p>;
  const column = (title: string, msgs: Msg[], id: string) => (
    <div className="chat-side">
      <h3>{title}</h3>
      <ol className="conversation" data-testid={`chat-${id}`}>
        {msgs.map((m, i) => (
          <li key={i} className={`msg ${m.role}`}>
            <span className="role">{m.role}</span>
            <pre>{m.content}</pre>
          </li>
        ))}
      </ol>
    </div>
  );
  return (
    <section aria-label="Chat with the model" className="play">
      {props.systemPrompt && <p className="muted small">System prompt: {props.systemPrompt}</p>}
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          void send();
        }}
      >
        <input aria-label="Message" value={text} onChange={(e) => setText(e.target.value)} disabled={thinking} />
        <button type="submit" disabled={thinking || !text.trim()}>
          Send
        </button>
        <button type="button" disabled={thinking} onClick={() => setSides({ model: [], base: [] })}>
          Clear
        </button>
      </form>
      {thinking && <p aria-live="polite">The models are answering…</p>}
      {error && <p className="error">{error}</p>}
      <div className="chat-pair">
        {column(`${props.run} (latest checkpoint)`, sides.model, "model")}
        {column("Base model (adapter off)", sides.base, "base")}
      </div>
    </section>
  );
}
