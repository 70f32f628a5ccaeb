// Two scripted searchers to play through `scriptedOpenAI`, as bounds for a model: a perfect one (searches the
// question's distinctive words, reads the one result, answers) and a naive one (searches the question's first
// content word, reads the newest result, answers with its sentence closest to the question). Both read only what
// the tools return; the perfect one also knows which words to search and what the answer looks like.
import type { ScriptedPolicy, ScriptedReply } from "../scripted.ts";
import type { Message } from "../types.ts";
import type { EmailScenario } from "./inbox.ts";

const call = (name: string, args: object): ScriptedReply => ({
  toolCalls: [{ name, arguments: JSON.stringify(args) }],
});
const answer = (text: string, messageId: string) =>
  call("return_final_answer", { answer: text, message_id: messageId });

/** The last tool result and the name of the tool that gave it (null on the first turn). */
function lastResult(messages: Message[]): { tool: string; value: unknown } | null {
  const last = messages[messages.length - 1];
  if (last.role !== "tool") return null;
  for (const m of [...messages].reverse()) {
    if (m.role !== "assistant" || !m.tool_calls) continue;
    const c = m.tool_calls.find((x) => x.id === last.tool_call_id);
    if (c && c.type === "function") return { tool: c.function.name, value: JSON.parse(String(last.content)) };
  }
  throw new Error(`tool result ${last.tool_call_id} answers no call`);
}

interface ReadResult {
  message_id: string;
  subject: string;
  body: string;
  error?: string;
}

export function perfectSearcher(s: EmailScenario, opts: { sender?: boolean } = {}): ScriptedPolicy {
  const q = s.question;
  // sender false: the keywords alone, as a model that cannot copy names would search (the right email less often).
  const from = opts.sender === false ? undefined : q.from;
  return (messages) => {
    const r = lastResult(messages);
    if (!r) return call("search_inbox", from ? { keywords: q.keywords, from } : { keywords: q.keywords });
    if (r.tool === "search_inbox") {
      const found = r.value as { message_id: string }[];
      return found.length ? call("read_email", { message_id: found[0].message_id }) : answer("not found", "none");
    }
    const e = r.value as ReadResult;
    return e.body?.includes(q.answer) ? answer(q.answer, e.message_id) : answer("not found", e.message_id ?? "none");
  };
}

const STOPWORDS = new Set(
  "when where what who how much many time does did do is are was the a an to that for of say said".split(" "),
);

/** The first word of a question that is not a question or function word ("dentist", "dana"). */
export function firstContentWord(question: string): string {
  const words = question
    .toLowerCase()
    .replace(/'s\b/g, "")
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
  return words.find((w) => !STOPWORDS.has(w)) ?? words[0];
}

/** The keywords of a search_inbox call's arguments (a JSON string), or [] when they cannot be read. */
export function searchKeywords(args: string): string[] {
  try {
    const kw = (JSON.parse(args) as { keywords?: unknown }).keywords;
    return Array.isArray(kw) && kw.every((k) => typeof k === "string") ? kw : [];
  } catch {
    return [];
  }
}

/** Whether a search is made of the question's own words (any case): some keywords, each non-empty and in it. */
export function searchesQuestion(keywords: string[], question: string): boolean {
  const q = question.toLowerCase();
  return keywords.length > 0 && keywords.every((k) => k && q.includes(k.toLowerCase()));
}

export function naiveSearcher(): ScriptedPolicy {
  return (messages) => {
    const r = lastResult(messages);
    const question = String(messages.find((m) => m.role === "user")?.content ?? "");
    if (!r) return call("search_inbox", { keywords: [firstContentWord(question)] });
    if (r.tool === "search_inbox") {
      const found = r.value as { message_id: string }[];
      return found.length ? call("read_email", { message_id: found[0].message_id }) : answer("I don't know", "none");
    }
    const e = r.value as ReadResult;
    if (e.error) return answer("I don't know", "none");
    const words = new Set(question.toLowerCase().split(/\W+/));
    const overlap = (t: string) =>
      t
        .toLowerCase()
        .split(/\W+/)
        .filter((w) => words.has(w)).length;
    const sentences = e.body.split(/(?<=[.!?])\s+|\n+/).filter((x) => x.trim());
    const best = sentences.reduce((a, b) => (overlap(b) > overlap(a) ? b : a));
    return answer(best.trim(), e.message_id);
  };
}
