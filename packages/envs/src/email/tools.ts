// The agent's three tools as OpenAI function tools (JSON Schema), and one call of them: its result text, the final
// answer, or why the call is malformed. A call is malformed when it cannot be carried out at all: an unknown tool,
// arguments that are not a JSON object, or a required field missing or of the wrong type. A legal call with a
// bad value (an unknown message id, a date that is not ISO, no keywords) gets an error text back instead.
import type OpenAI from "openai";
import type { Inbox } from "./inbox.ts";
import { MAX_SEARCH_RESULTS, readEmail, searchInbox } from "./search.ts";

const string = (description: string) => ({ type: "string", description });

export const EMAIL_TOOLS: OpenAI.Chat.Completions.ChatCompletionFunctionTool[] = [
  {
    type: "function",
    function: {
      name: "search_inbox",
      description: `Find emails whose subject or body contains every keyword (any case). Returns up to ${MAX_SEARCH_RESULTS} ids with a snippet, newest first.`,
      parameters: {
        type: "object",
        properties: {
          keywords: { type: "array", items: { type: "string" }, description: "words that must all appear" },
          from: string("only emails whose sender contains this, e.g. a first name"),
          before: string("only emails sent before this ISO date, e.g. 2024-03-05"),
          after: string("only emails sent on or after this ISO date"),
        },
        required: ["keywords"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "read_email",
      description: "Read one email by its id.",
      parameters: {
        type: "object",
        properties: { message_id: string("the id from a search result, e.g. m1234") },
        required: ["message_id"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "return_final_answer",
      description: "Give the answer and the id of the email it comes from. Ends the conversation.",
      parameters: {
        type: "object",
        properties: { answer: string("a short answer"), message_id: string("the email that answers the question") },
        required: ["answer", "message_id"],
        additionalProperties: false,
      },
    },
  },
];

/** Longest phrase (in words) of the text read that a guided answer may be: as long as a right answer may be. */
export const GUIDED_ANSWER_WORDS = 20;

/**
 * The tools of one guided turn (`toolChoice: "guided"`): EMAIL_TOOLS with every value limited to what the episode
 * has shown the agent, for webart's `guided_tools`. search_inbox takes 1-3 words of the question as keywords
 * (and one as `from`); read_email an id that a tool result named (offered only once one has); return_final_answer
 * a phrase of 1-GUIDED_ANSWER_WORDS words within a sentence of the results' subjects, snippets and bodies as
 * written (addPhrases), or "not found", and a named id or "none". The agent still picks which words, which email
 * and which phrase: that is what it learns.
 */
export function guidedEmailTools(
  question: string,
  results: readonly string[],
): OpenAI.Chat.Completions.ChatCompletionFunctionTool[] {
  const words = [
    ...new Set(
      question
        .replace(/'s\b/g, "")
        .split(/[^A-Za-z0-9$]+/)
        .filter(Boolean),
    ),
  ];
  const ids = new Set<string>();
  const phrases = new Set<string>();
  for (const e of results.flatMap(resultEntries)) {
    if (typeof e.message_id === "string") ids.add(e.message_id);
    for (const text of [e.subject, e.snippet, e.body]) if (typeof text === "string") addPhrases(text, phrases);
  }
  const [search, read, final] = EMAIL_TOOLS;
  const word = { type: "string", enum: words };
  const tools = [
    withProperties(search, { keywords: { type: "array", items: word, minItems: 1, maxItems: 3 }, from: word }),
  ];
  if (ids.size) tools.push(withProperties(read, { message_id: { type: "string", enum: [...ids] } }));
  tools.push(
    withProperties(final, {
      answer: { type: "string", enum: ["not found", ...phrases] },
      message_id: { type: "string", enum: [...ids, "none"] },
    }),
  );
  return tools;
}

/**
 * Adds to `phrases` every run of 1-GUIDED_ANSWER_WORDS words of one sentence (or line) of `text` as it is written,
 * commas inside kept, so a model that copies text can copy it; the last word with or without its trailing
 * punctuation. A snippet's words cut by its "…" are left out.
 */
function addPhrases(text: string, phrases: Set<string>): void {
  for (const w of sentenceWords(text))
    for (let i = 0; i < w.length; i++)
      for (let n = 1; n <= GUIDED_ANSWER_WORDS && i + n <= w.length; n++) {
        const head = w.slice(i, i + n - 1);
        const last = w[i + n - 1];
        const bare = last.replace(/[.,;:!?"')]+$/, "");
        if (bare) phrases.add([...head, bare].join(" "));
        phrases.add([...head, last].join(" "));
      }
}

/** The words of each sentence (or line) of `text` as written; a snippet's words cut by its "…" left out. */
function sentenceWords(text: string): string[][] {
  return text
    .split(/(?<=[.!?])\s+|\s*\n\s*/)
    .map((sentence) => {
      const w = sentence.split(/\s+/).filter(Boolean);
      if (w[0]?.startsWith("…")) w.shift();
      if (w.at(-1)?.endsWith("…")) w.pop();
      if (w.length) w[0] = w[0].replace(/^["'(]+/, "");
      return w;
    })
    .filter((w) => w.length > 0);
}

/** The sentences and lines of `text` as guided answers can write them whole (see addPhrases). */
export const sentencesOf = (text: string): string[] =>
  sentenceWords(text)
    .filter((w) => w.length <= GUIDED_ANSWER_WORDS)
    .map((w) => w.join(" "));

/**
 * return_final_answer with both values fixed, for webart's `guided_tools` with a named tool_choice: the server
 * then reports the reply as forced (SampledChoice.forced), trained only toward and outside the KL term.
 */
export const fixedAnswerTool = (
  answer: string,
  messageId: string,
): OpenAI.Chat.Completions.ChatCompletionFunctionTool =>
  withProperties(EMAIL_TOOLS[2], {
    answer: { type: "string", enum: [answer] },
    message_id: { type: "string", enum: [messageId] },
  });

/** One of EMAIL_TOOLS with its parameters' properties replaced (the same required ones, no others allowed). */
function withProperties(
  t: (typeof EMAIL_TOOLS)[number],
  properties: object,
): OpenAI.Chat.Completions.ChatCompletionFunctionTool {
  return {
    ...t,
    function: {
      ...t.function,
      parameters: {
        type: "object",
        properties,
        required: t.function.parameters!.required,
        additionalProperties: false,
      },
    },
  };
}

/** The emails a tool result names (a search's results, or the email read; none for an error), as parsed JSON. */
function resultEntries(content: string): Record<string, unknown>[] {
  let v: unknown;
  try {
    v = JSON.parse(content);
  } catch {
    return [];
  }
  return (Array.isArray(v) ? v : [v]).filter((e): e is Record<string, unknown> => e !== null && typeof e === "object");
}

export type ToolOutcome =
  | { type: "result"; tool: "search_inbox" | "read_email"; content: string }
  | { type: "final"; answer: string; messageId: string }
  | { type: "malformed"; reason: string };

/** Carries out one call; `args` is the call's arguments as the model wrote them (a JSON string). */
export function callTool(inbox: Inbox, name: string, args: string): ToolOutcome {
  let a: unknown;
  try {
    a = JSON.parse(args);
  } catch {
    return { type: "malformed", reason: `${name}: arguments are not JSON: ${JSON.stringify(args.slice(0, 80))}` };
  }
  if (a === null || typeof a !== "object" || Array.isArray(a))
    return { type: "malformed", reason: `${name}: arguments are not a JSON object: ${args.slice(0, 80)}` };
  const o = a as Record<string, unknown>;
  const wrong = (field: string, type: string) => ({
    type: "malformed" as const,
    reason: `${name}: "${field}" ${field in o && o[field] !== undefined ? "is not" : "is missing, expected"} ${type}`,
  });
  const str = (field: string) => typeof o[field] === "string";
  const optional = (field: string) => o[field] === undefined || o[field] === null || str(field);
  switch (name) {
    case "search_inbox": {
      const kw = o.keywords;
      if (!Array.isArray(kw) || !kw.every((k) => typeof k === "string")) return wrong("keywords", "a list of strings");
      for (const f of ["from", "before", "after"]) if (!optional(f)) return wrong(f, "a string");
      const found = searchInbox(inbox, {
        keywords: kw as string[],
        from: (o.from as string | null) ?? undefined,
        before: (o.before as string | null) ?? undefined,
        after: (o.after as string | null) ?? undefined,
      });
      return { type: "result", tool: name, content: JSON.stringify("error" in found ? found : found.results) };
    }
    case "read_email": {
      if (!str("message_id")) return wrong("message_id", "a string");
      const e = readEmail(inbox, o.message_id as string);
      if ("error" in e) return { type: "result", tool: name, content: JSON.stringify(e) };
      const { id, ...rest } = e;
      return { type: "result", tool: name, content: JSON.stringify({ message_id: id, ...rest }) };
    }
    case "return_final_answer":
      if (!str("answer")) return wrong("answer", "a string");
      if (!str("message_id")) return wrong("message_id", "a string");
      return { type: "final", answer: o.answer as string, messageId: (o.message_id as string).trim() };
    default:
      return {
        type: "malformed",
        reason: `unknown tool ${JSON.stringify(name)} (tools: ${EMAIL_TOOLS.map((t) => t.function.name).join(", ")})`,
      };
  }
}
