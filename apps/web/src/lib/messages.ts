// A saved trajectory's messages as the rollout viewer and the Play tab show them (made in the worker, which alone
// imports this; the page gets plain data): each message's role and text, the
// tool calls an assistant turn made (name and arguments) and which call a tool result answers.
import { isChoice, type MessageOrChoice } from "webart/engine";

export interface ToolCallView {
  id: string;
  name: string;
  /** The arguments as the model wrote them (JSON text, or whatever it wrote instead). */
  arguments: string;
}

export interface MessageView {
  role: string;
  content: string;
  /** An assistant turn's tool calls, in order. */
  toolCalls?: ToolCallView[];
  /** A tool result: the call it answers, and that call's tool name when the conversation holds it. */
  toolCallId?: string;
  toolName?: string;
  /** A reply the server forced (guided_choice of one string: tic-tac-toe's exploration), not the model's pick. */
  forced?: boolean;
}

type Call = { id?: string; type?: string; function?: { name?: string; arguments?: string } };

const callsOf = (calls: readonly Call[] | undefined | null): ToolCallView[] | undefined =>
  calls?.length
    ? calls.map((c) => ({
        id: c.id ?? "",
        name: c.function?.name ?? `(${c.type ?? "unknown"} call)`,
        arguments: c.function?.arguments ?? "",
      }))
    : undefined;

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content.map((p) => (p && typeof p === "object" && "text" in p ? String(p.text) : "")).join("");
  return "";
}

/** One conversation (messages and sampled Choices, as a Trajectory holds them) as views. */
export function messageViews(history: readonly MessageOrChoice[]): MessageView[] {
  const names = new Map<string, string>();
  return history.map((m) => {
    const msg = isChoice(m) ? { ...m.message, role: "assistant" } : m;
    const v: MessageView = { role: msg.role, content: textOf(msg.content) };
    if (isChoice(m) && m.forced) v.forced = true;
    const calls = callsOf((msg as { tool_calls?: Call[] }).tool_calls);
    if (calls) {
      v.toolCalls = calls;
      for (const c of calls) names.set(c.id, c.name);
    }
    const id = (msg as { tool_call_id?: string }).tool_call_id;
    if (msg.role === "tool" && id !== undefined) {
      v.toolCallId = id;
      const name = names.get(id);
      if (name) v.toolName = name;
    }
    return v;
  });
}

/** A tool call as one line: `search_inbox({"keywords":"dentist"})`. */
export const callLine = (c: ToolCallView): string => `${c.name}(${c.arguments})`;
