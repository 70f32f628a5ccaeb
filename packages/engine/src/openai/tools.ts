// Hermes/Qwen tool calls: the model writes <tool_call>{"name": ..., "arguments": {...}}</tool_call>
// blocks; they become OpenAI `tool_calls`, and the rest of the text stays the message content.

export interface ParsedToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export const TOOL_OPEN = "<tool_call>";
export const TOOL_CLOSE = "</tool_call>";

let counter = 0;
function callId(): string {
  counter = (counter + 1) % 1e9;
  return `call_${Date.now().toString(36)}${counter.toString(36).padStart(4, "0")}`;
}

/** Splits generated text into content and tool calls; blocks that are not valid JSON stay content. */
export function parseToolCalls(text: string): { content: string | null; toolCalls: ParsedToolCall[] } {
  const toolCalls: ParsedToolCall[] = [];
  let content = "";
  let rest = text;
  for (;;) {
    const open = rest.indexOf(TOOL_OPEN);
    if (open < 0) {
      content += rest;
      break;
    }
    const close = rest.indexOf(TOOL_CLOSE, open + TOOL_OPEN.length);
    const body = rest.slice(open + TOOL_OPEN.length, close < 0 ? undefined : close);
    const call = parseCall(body);
    if (call) {
      content += rest.slice(0, open);
      toolCalls.push(call);
    } else {
      content += rest.slice(0, close < 0 ? undefined : close + TOOL_CLOSE.length);
    }
    if (close < 0) break;
    rest = rest.slice(close + TOOL_CLOSE.length);
  }
  const trimmed = content.trim();
  return { content: toolCalls.length && !trimmed ? null : toolCalls.length ? trimmed : content, toolCalls };
}

function parseCall(body: string): ParsedToolCall | null {
  let j: unknown;
  try {
    j = JSON.parse(body.trim());
  } catch {
    return null;
  }
  if (typeof j !== "object" || j === null) return null;
  const o = j as { name?: unknown; arguments?: unknown; parameters?: unknown };
  if (typeof o.name !== "string") return null;
  const args = o.arguments ?? o.parameters ?? {};
  return {
    id: callId(),
    type: "function",
    function: { name: o.name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}

/**
 * Incremental stop-string matcher: feed text as it is decoded; it returns what can be shown now,
 * holding back a tail that might still become a stop string.
 */
export class StopMatcher {
  private held = "";
  stopped = false;

  constructor(private stops: string[]) {}

  push(text: string): string {
    if (this.stopped) return "";
    const buf = this.held + text;
    let cut = -1;
    for (const s of this.stops) {
      const i = buf.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    if (cut >= 0) {
      this.stopped = true;
      this.held = "";
      return buf.slice(0, cut);
    }
    let keep = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, buf.length); k > keep; k--) {
        if (buf.endsWith(s.slice(0, k))) {
          keep = k;
          break;
        }
      }
    }
    this.held = buf.slice(buf.length - keep);
    return buf.slice(0, buf.length - keep);
  }

  /** Whatever is held back, at the end of generation. */
  flush(): string {
    const h = this.stopped ? "" : this.held;
    this.held = "";
    return h;
  }
}
