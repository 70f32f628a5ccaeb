// Tool calls in the model's own format, parsed as the text arrives, so that a stream delivers them the way
// OpenAI streams them (a first delta with index, id, type and name, then the arguments in pieces) and a
// non-streamed answer is the same events put together.
// - hermes (Qwen, Hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks anywhere in
//   the reply; the rest is content.
// - llama3_json (Llama 3.1/3.2/3.3): the whole reply is `{"name": ..., "parameters": {...}}`, optionally after
//   `<|python_tag|>`, several separated by `;`; a reply that does not start with `{` is content.
// Arguments are the model's JSON with the whitespace outside strings dropped (so `{"a": 1}` arrives as
// `{"a":1}`, piece by piece). A call counts once its name and arguments are complete: what follows the
// arguments up to the end of the call (normally `}`) is not checked. A call the generation cut off keeps the
// arguments written so far, as OpenAI's do with finish_reason "length".
// Whitespace right before a call is dropped, and so is trailing whitespace of a reply with calls; a reply
// that is only calls has content null.
import { StreamDecoder } from "../tokenizer/stream.ts";
import type { TokenConstraint } from "../generate/types.ts";

export type ToolFormat = "hermes" | "llama3_json";

export interface ParsedToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export type ToolEvent =
  | { type: "content"; text: string }
  | { type: "call"; index: number; id: string; name: string }
  | { type: "arguments"; index: number; text: string };

export const TOOL_OPEN = "<tool_call>";
export const TOOL_CLOSE = "</tool_call>";
export const PYTHON_TAG = "<|python_tag|>";

let counter = 0;
function callId(): string {
  counter = (counter + 1) % 1e9;
  return `call_${Date.now().toString(36)}${counter.toString(36).padStart(4, "0")}`;
}

/** The start of a call up to its arguments' value: the name must come first (as both formats write it). */
const HEAD = /^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*/;
const isWs = (c: string) => c === " " || c === "\n" || c === "\r" || c === "\t";

/** The tool-call format a chat template writes: Llama 3's JSON calls, else Hermes <tool_call> blocks. */
export function detectToolFormat(template: string | { template: string }[] | null): ToolFormat {
  const src = typeof template === "string" ? template : (template ?? []).map((t) => t.template).join("\n");
  if (src.includes(TOOL_OPEN)) return "hermes";
  if (src.includes("<|start_header_id|>") && (src.includes('"parameters"') || src.includes(PYTHON_TAG)))
    return "llama3_json";
  return "hermes";
}

/**
 * Messages as a chat template in `format` expects them. Llama 3's template writes a call's arguments with `| tojson`,
 * so they go in as objects, not JSON strings (OpenAI's form). The engine's tokenizer renders every chat through
 * this (chatTokenizer), so the server's prompts and the trainer's contexts for the same messages are the same ids.
 */
export function templateMessages<M>(format: ToolFormat, messages: M[]): M[] {
  if (format !== "llama3_json") return messages;
  return messages.map((m) => {
    const calls = (m as { tool_calls?: { function: { arguments?: unknown } }[] }).tool_calls;
    if (!calls?.length) return m;
    const tool_calls = calls.map((c) => {
      const args = c.function.arguments;
      if (typeof args !== "string") return c;
      try {
        return { ...c, function: { ...c.function, arguments: JSON.parse(args) as unknown } };
      } catch {
        return c;
      }
    });
    return { ...m, tool_calls };
  });
}

/** Index just past the JSON value that starts at text[0] (after whitespace), or -1 while it is unfinished. */
function valueEnd(text: string): number {
  let depth = 0;
  let inStr = false;
  let esc = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inStr) {
      if (esc) esc = false;
      else if (c === "\\") esc = true;
      else if (c === '"') {
        inStr = false;
        if (depth === 0) return i + 1;
      }
    } else if (c === '"') inStr = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (--depth <= 0) return i + 1;
    }
  }
  return -1;
}

/** A whole call's JSON (the fallback when the name does not come first): null when it is not one. */
function parseCall(body: string): { name: string; arguments: string } | null {
  let j: unknown;
  try {
    j = JSON.parse(body.trim());
  } catch {
    return null;
  }
  if (typeof j !== "object" || j === null || Array.isArray(j)) return null;
  const o = j as { name?: unknown; arguments?: unknown; parameters?: unknown };
  if (typeof o.name !== "string") return null;
  const args = o.arguments ?? o.parameters ?? {};
  return { name: o.name, arguments: typeof args === "string" ? args : JSON.stringify(args) };
}

type Mode = "text" | "start" | "plain" | "head" | "args" | "tail" | "after";

/** Incremental parser: push text as it is released, end() at the end of generation. */
export class ToolCallParser {
  /** Input characters accounted for (emitted as content or calls, or dropped as markup). */
  consumed = 0;
  /** Calls whose arguments are complete and whose end was seen (or the generation ended after them). */
  completeCalls = 0;
  readonly calls: ParsedToolCall[] = [];
  content = "";
  private mode: Mode;
  private buf = "";
  /** Trailing whitespace of the content, held until more content follows or a call starts. */
  private held = "";
  // The arguments scanner: nesting depth, inside a string, after a backslash, a string-valued argument.
  private depth = 0;
  private inStr = false;
  private esc = false;
  private strArgs: string | null = null;
  private scalar = false;

  constructor(
    readonly format: ToolFormat,
    /** At most this many calls (parallel_tool_calls false: 1); text after the last allowed call is dropped. */
    private readonly maxCalls = Infinity,
  ) {
    this.mode = format === "hermes" ? "text" : "start";
  }

  /** A call was started but its arguments never finished (the generation was cut off). */
  get incomplete(): boolean {
    return this.mode === "args";
  }

  push(text: string): ToolEvent[] {
    const out: ToolEvent[] = [];
    this.buf += text;
    while (this.buf && this.step(out));
    return out;
  }

  end(): ToolEvent[] {
    const out: ToolEvent[] = [];
    if (this.mode === "head") {
      // Never became a call: the text stays content.
      this.mode = this.format === "hermes" ? "text" : "plain";
      this.emitContent(this.buf, out, true);
    } else if (this.mode === "text" || this.mode === "plain" || this.mode === "start")
      this.emitContent(this.buf, out, true);
    else if (this.mode === "tail" || this.mode === "after") {
      if (this.mode === "tail") this.completeCalls++;
      this.drop(this.buf.length);
    } else if (this.mode === "args" && this.strArgs !== null) {
      // A string argument cut off: what it holds so far.
      this.args(this.strArgs, out);
    }
    this.buf = "";
    if (this.held) {
      if (this.calls.length) this.consumed += this.held.length;
      else this.emit({ type: "content", text: this.held }, out);
      this.held = "";
    }
    return out;
  }

  /** One step of the state machine on `buf`; false when it needs more text. */
  private step(out: ToolEvent[]): boolean {
    const buf = this.buf;
    switch (this.mode) {
      case "plain":
        this.emitContent(buf, out);
        return false;
      case "text": {
        if (this.calls.length >= this.maxCalls) {
          this.drop(buf.length);
          return false;
        }
        const i = buf.indexOf(TOOL_OPEN);
        if (i >= 0) {
          this.emitContent(buf.slice(0, i), out);
          this.startCall();
          return true;
        }
        // Hold a tail that may still become the open tag.
        let keep = Math.min(buf.length, TOOL_OPEN.length - 1);
        while (keep > 0 && !TOOL_OPEN.startsWith(buf.slice(buf.length - keep))) keep--;
        this.emitContent(buf.slice(0, buf.length - keep), out);
        return false;
      }
      case "start": {
        // Llama: whitespace, an optional <|python_tag|>, then '{' for a call or anything else for content.
        let i = 0;
        while (i < buf.length && isWs(buf[i])) i++;
        const rest = buf.slice(i);
        if (!rest) return false;
        if (rest.startsWith(PYTHON_TAG)) {
          this.drop(i + PYTHON_TAG.length);
          return true;
        }
        if (PYTHON_TAG.startsWith(rest)) return false;
        if (rest[0] === "{") {
          this.drop(i);
          this.startCall();
        } else this.mode = "plain";
        return true;
      }
      case "head": {
        const open = this.format === "hermes" ? TOOL_OPEN.length : 0;
        const m = HEAD.exec(buf.slice(open));
        let name: string | null = null;
        if (m) {
          try {
            name = JSON.parse(`"${m[1]}"`) as string;
          } catch {
            // Not a valid JSON string: decided by the fallback below.
          }
        }
        if (name !== null && m) {
          this.emit({ type: "call", index: this.calls.length, id: callId(), name }, out);
          this.drop(open + m[0].length);
          this.mode = "args";
          this.depth = 0;
          this.inStr = this.esc = this.scalar = false;
          this.strArgs = null;
          return true;
        }
        // The name does not come first (or is not there yet): wait for the whole call, then parse it.
        const end = this.format === "hermes" ? buf.indexOf(TOOL_CLOSE, open) : valueEnd(buf);
        if (end < 0) return false;
        const body = buf.slice(open, end);
        const call = parseCall(body);
        if (!call) {
          // Not a call: the text is content (for Llama, the rest of the reply too).
          const upto = this.format === "hermes" ? end + TOOL_CLOSE.length : buf.length;
          this.mode = this.format === "hermes" ? "text" : "plain";
          this.emitContent(buf.slice(0, upto), out, true);
          return true;
        }
        const index = this.calls.length;
        this.emit({ type: "call", index, id: callId(), name: call.name }, out);
        this.emit({ type: "arguments", index, text: call.arguments }, out);
        this.completeCalls++;
        this.drop(this.format === "hermes" ? end + TOOL_CLOSE.length : end);
        this.mode = this.format === "hermes" ? "text" : "after";
        return true;
      }
      case "args":
        this.scanArguments(out);
        return this.mode !== "args";
      case "tail": {
        // After the arguments: up to the end of the call (the close tag, or the object's closing brace).
        const end = this.format === "hermes" ? buf.indexOf(TOOL_CLOSE) : valueEnd("{" + buf) - 1;
        if (end < 0) return false;
        this.drop(end + (this.format === "hermes" ? TOOL_CLOSE.length : 0));
        this.completeCalls++;
        this.mode = this.format === "hermes" ? "text" : "after";
        return true;
      }
      case "after": {
        // Llama: `;` and another call, or the end; other text after the calls is content.
        let i = 0;
        while (i < buf.length && isWs(buf[i])) i++;
        if (i === buf.length) return false;
        if (this.calls.length >= this.maxCalls) {
          this.drop(buf.length);
          return false;
        }
        if (buf[i] === ";") {
          this.drop(i + 1);
          this.mode = "start";
          return true;
        }
        this.mode = "plain";
        return true;
      }
    }
  }

  /** Consumes argument characters from buf, emitting them without the whitespace outside strings. */
  private scanArguments(out: ToolEvent[]): void {
    const buf = this.buf;
    let piece = "";
    let i = 0;
    for (; i < buf.length && this.mode === "args"; i++) {
      const c = buf[i];
      if (this.strArgs !== null) {
        // A string-valued argument (some models write the JSON as a string): its value, once complete.
        this.strArgs += c;
        if (this.esc) this.esc = false;
        else if (c === "\\") this.esc = true;
        else if (c === '"') {
          let v: unknown;
          try {
            v = JSON.parse(this.strArgs);
          } catch {
            v = this.strArgs;
          }
          this.strArgs = null;
          piece += v as string;
          this.mode = "tail";
        }
      } else if (this.inStr) {
        piece += c;
        if (this.esc) this.esc = false;
        else if (c === "\\") this.esc = true;
        else if (c === '"') this.inStr = false;
      } else if (this.scalar) {
        // A number or literal argument ends at whitespace or a delimiter, which belongs to the tail.
        if (isWs(c) || c === "," || c === "}" || c === "]") {
          this.mode = "tail";
          break;
        }
        piece += c;
      } else if (isWs(c)) continue;
      else if (this.depth === 0 && c === '"') this.strArgs = c;
      else {
        piece += c;
        if (c === '"') this.inStr = true;
        else if (c === "{" || c === "[") this.depth++;
        else if (c === "}" || c === "]") {
          if (--this.depth === 0) this.mode = "tail";
        } else if (this.depth === 0) this.scalar = true;
      }
    }
    this.drop(i);
    if (piece) this.args(piece, out);
  }

  private args(text: string, out: ToolEvent[]): void {
    this.emit({ type: "arguments", index: this.calls.length - 1, text }, out);
  }

  private startCall(): void {
    // Whitespace before a call is dropped.
    this.consumed += this.held.length;
    this.held = "";
    this.mode = "head";
  }

  /** Content, holding back its trailing whitespace (dropped if a call follows); `all` includes it. */
  private emitContent(text: string, out: ToolEvent[], all = false): void {
    if (!text) return;
    this.buf = this.buf.slice(text.length);
    const s = this.held + text;
    let cut = s.length;
    if (!all) while (cut > 0 && isWs(s[cut - 1])) cut--;
    this.held = s.slice(cut);
    if (cut > 0) this.emit({ type: "content", text: s.slice(0, cut) }, out);
  }

  private drop(n: number): void {
    this.buf = this.buf.slice(n);
    this.consumed += n;
  }

  private emit(e: ToolEvent, out: ToolEvent[]): void {
    out.push(e);
    if (e.type === "content") {
      this.content += e.text;
      this.consumed += e.text.length;
    } else if (e.type === "call")
      this.calls.push({ id: e.id, type: "function", function: { name: e.name, arguments: "" } });
    else this.calls[e.index].function.arguments += e.text;
  }
}

/**
 * parallel_tool_calls false without forcing: free text until the first call is complete, then only the
 * end-of-turn tokens, so the reply holds at most one call and still ends the way the model ends a turn.
 */
export function firstCallOnly(
  format: ToolFormat,
  decode: (ids: number[]) => string,
  stopIds: number[],
  vocabSize: number,
): () => TokenConstraint {
  const eos = new Uint32Array(Math.ceil(vocabSize / 32));
  for (const id of stopIds) if (id < vocabSize) eos[id >>> 5] |= 1 << (id & 31);
  return () => {
    const text = new StreamDecoder(decode);
    const parser = new ToolCallParser(format);
    return {
      allowed: () => (parser.completeCalls > 0 ? eos : null),
      accept: (id) => void parser.push(text.push(id)),
      done: () => false,
    };
  };
}

/** One chunk's delta from a run of events: the content joined, each call's pieces joined under its index. */
export function deltaOf(events: ToolEvent[]): { content?: string; tool_calls?: Record<string, unknown>[] } {
  const delta: { content?: string; tool_calls?: Record<string, unknown>[] } = {};
  const calls = new Map<number, { index: number; id?: string; type?: "function"; function: Record<string, string> }>();
  for (const e of events) {
    if (e.type === "content") delta.content = (delta.content ?? "") + e.text;
    else {
      let c = calls.get(e.index);
      if (!c) calls.set(e.index, (c = { index: e.index, function: {} }));
      if (e.type === "call")
        Object.assign(c, { id: e.id, type: "function" }, { function: { name: e.name, arguments: "" } });
      else c.function.arguments = (c.function.arguments ?? "") + e.text;
    }
  }
  if (calls.size) delta.tool_calls = [...calls.values()];
  return delta;
}

/** Splits a whole reply into content and tool calls (the streaming parser, fed at once). */
export function parseToolCalls(
  text: string,
  format: ToolFormat = "hermes",
): { content: string | null; toolCalls: ParsedToolCall[] } {
  const p = new ToolCallParser(format);
  p.push(text);
  p.end();
  return { content: p.calls.length && !p.content ? null : p.content, toolCalls: p.calls };
}
