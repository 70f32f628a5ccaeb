// Tool-use transcripts for pretraining a model that can start on the email task: episodes on training-split inboxes
// played by scripted searchers through the rollout itself (rolloutEmail over a scripted openai server), so each
// conversation is exactly what a model is offered and writes: the system prompt, the question, the tool calls with
// their JSON arguments and the tool results, with the tools' definitions beside it.
import { Rng } from "@webart/gpu";
import { naiveSearcher, perfectSearcher } from "../email/baselines.ts";
import { emailScenario, type EmailScenario } from "../email/inbox.ts";
import { rolloutEmail } from "../email/rollout.ts";
import { scriptedOpenAI, type ScriptedPolicy } from "../scripted.ts";
import { isChoice, type Message, type Tool } from "../types.ts";

export interface ToolTranscript {
  messages: Message[];
  tools: Tool[];
  /** The inbox's scenario seed (a training one). */
  seed: number;
  /** Indices of assistant messages not to train on: a slip (the model sees it, but is not taught it). */
  untrained?: number[];
}

export interface EmailTranscriptOptions {
  episodes: number;
  /** The first training scenario's index (episodes take the indices from here on). Default 0. */
  start?: number;
  /** Share of episodes played by the perfect searcher (the question's distinctive words); the rest by the naive
   *  one (its first content word, the newest result read, its closest sentence answered). Default 0. */
  perfect?: number;
  /** Share of the perfect searcher's episodes with a slip (slipSearcher): a search with a garbled sender or keyword,
   *  or a read of a garbled id, as a small model's calls often are, then the right call: what to do after a search
   *  that finds nothing or an id that is not there. Default 0. */
  slip?: number;
  /** Whether the perfect searcher names the question's sender in its search (`from`). Default true. */
  sender?: boolean;
  seed?: number;
}

/** A word cut short or run into noise: "Ha" for "Zara", "Den oned" for "Denver". */
function garble(rng: Rng, w: string): string {
  const cut = w.slice(0, 1 + Math.floor(rng.next() * Math.max(1, w.length - 2)));
  return rng.next() < 0.3 ? cut : `${cut}${"aeiou"[Math.floor(rng.next() * 5)]}x`;
}

/** An id with one digit changed or dropped: "m1763" -> "m17663" or "m173". */
function garbleId(rng: Rng, id: string): string {
  const i = 1 + Math.floor(rng.next() * (id.length - 1));
  const d = String(Math.floor(rng.next() * 10));
  return rng.next() < 0.5 ? id.slice(0, i) + id.slice(i + 1) : id.slice(0, i) + d + id.slice(i);
}

/** The perfect searcher with one slip, a call a small model often gets wrong, followed by the right one: a first
 *  search with a garbled sender or keyword (it reads the first result as usual, or, when the slip found nothing,
 *  makes its own search), or a read of a garbled id (an error, then the right read). Returns the policy and the
 *  index of the slip's message in the conversation. */
function slipSearcher(s: EmailScenario, rng: Rng, sender: boolean): { policy: ScriptedPolicy; at: number } {
  const perfect = perfectSearcher(s, { sender });
  const q = s.question;
  const from = sender ? q.from : undefined;
  if (rng.next() < 0.4) {
    // A read of a wrong id: the perfect searcher then reads as if the slip had not happened.
    return {
      at: 4,
      policy: async (messages, request) => {
        const r = await perfect(messages.length >= 6 ? messages.filter((_, i) => i < 4 || i >= 6) : messages, request);
        const call = typeof r === "string" ? undefined : r.toolCalls?.[0];
        if (messages.length !== 4 || call?.name !== "read_email") return r;
        const args = JSON.parse(call.arguments) as { message_id: string };
        return {
          toolCalls: [
            { name: "read_email", arguments: JSON.stringify({ message_id: garbleId(rng, args.message_id) }) },
          ],
        };
      },
    };
  }
  const kw = [...q.keywords];
  let slip: object;
  if (from && rng.next() < 0.6) slip = { keywords: kw, from: garble(rng, from) };
  else {
    const i = Math.floor(rng.next() * kw.length);
    kw[i] = garble(rng, kw[i]);
    slip = from ? { keywords: kw, from } : { keywords: kw };
  }
  let found = true;
  return {
    at: 2,
    policy: (messages, request) => {
      if (messages.length === 2) return { toolCalls: [{ name: "search_inbox", arguments: JSON.stringify(slip) }] };
      if (messages.length === 4) found = messages[3].content !== "[]";
      return perfect(found ? messages : messages.filter((_, i) => i < 2 || i >= 4), request);
    },
  };
}

/** Episodes of the email task as chat transcripts with their tools (assistant turns with their tool_calls). */
export async function emailTranscripts(opts: EmailTranscriptOptions): Promise<ToolTranscript[]> {
  const rng = new Rng(opts.seed ?? 1);
  const out: ToolTranscript[] = [];
  const sender = opts.sender ?? true;
  for (let i = 0; i < opts.episodes; i++) {
    const scenario = emailScenario("train", (opts.start ?? 0) + i);
    const perfect = rng.next() < (opts.perfect ?? 0);
    const slipped = perfect && rng.next() < (opts.slip ?? 0) ? slipSearcher(scenario, rng, sender) : null;
    const policy = slipped ? slipped.policy : perfect ? perfectSearcher(scenario, { sender }) : naiveSearcher();
    const t = await rolloutEmail(scriptedOpenAI(policy).client, {
      scenario,
      model: "script",
      temperature: 1,
      maxTokens: 200,
    });
    const messages = t.messagesAndChoices.map((m): Message => {
      if (!isChoice(m)) return m;
      const { content, tool_calls } = m.message;
      return tool_calls?.length
        ? { role: "assistant", content: content || null, tool_calls }
        : { role: "assistant", content: content ?? "" };
    });
    out.push({ messages, tools: t.tools ?? [], seed: scenario.seed, ...(slipped ? { untrained: [slipped.at] } : {}) });
  }
  return out;
}
