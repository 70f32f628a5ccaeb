// One choice of a chat completion as its tokens arrive: decoded to whole UTF-8 characters, cut at stop strings,
// split into content and tool calls. Each piece carries the logprobs of the tokens whose text it completes
// (text held back by a partial stop string, an unfinished character or an unfinished call header keeps its
// tokens' logprobs until it is released), and the last piece carries the rest, so a stream delivers every
// token's logprobs exactly once and in order. Streamed and non-streamed answers run the same code.
import type { TokenEvent } from "../generate/types.ts";
import { StreamDecoder } from "../tokenizer/stream.ts";
import { StopMatcher } from "./stops.ts";
import { deltaOf, ToolCallParser, type ParsedToolCall, type ToolEvent, type ToolFormat } from "./tools.ts";

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChoicePiece {
  delta: ReturnType<typeof deltaOf>;
  logprobs: TokenLogprob[];
}

export interface ChoiceOptions {
  /** Text of ids, special tokens skipped. */
  decode: (ids: number[]) => string;
  stop: string[];
  /** Parse tool calls in this format (null: all text is content). */
  tools: ToolFormat | null;
  /** At most this many tool calls (parallel_tool_calls false: 1). */
  maxCalls: number;
  /** The logprobs entry of a token (absent: logprobs not requested). */
  logprob?: (e: TokenEvent) => TokenLogprob;
}

export class ChoiceStream {
  private readonly text: StreamDecoder;
  private readonly stops: StopMatcher;
  private readonly parser: ToolCallParser | null;
  private plain = "";
  /** Characters decoded, and released past the stop strings (plain content is sent as released). */
  private decoded = 0;
  private released = 0;
  /** Per token: the decoded length once its text is complete (-1 until then). */
  private readonly ends: number[] = [];
  private pending = 0;
  readonly logprobs: TokenLogprob[] = [];
  private sent = 0;

  constructor(private readonly o: ChoiceOptions) {
    this.text = new StreamDecoder(o.decode);
    this.stops = new StopMatcher(o.stop);
    this.parser = o.tools ? new ToolCallParser(o.tools, o.maxCalls) : null;
  }

  /** A stop string matched: generation of this choice should end. */
  get stopped(): boolean {
    return this.stops.stopped;
  }

  get content(): string | null {
    if (!this.parser) return this.plain;
    return this.parser.calls.length && !this.parser.content ? null : this.parser.content;
  }

  get toolCalls(): ParsedToolCall[] {
    return this.parser?.calls ?? [];
  }

  /** A tool call was cut off in its arguments. */
  get incompleteCall(): boolean {
    return this.parser?.incomplete ?? false;
  }

  /** Adds a sampled token; returns what can be sent now (null: nothing yet). */
  push(e: TokenEvent): ChoicePiece | null {
    this.ends.push(-1);
    if (this.o.logprob) this.logprobs.push(this.o.logprob(e));
    return this.piece(this.release(this.text.push(e.tokenId)), false);
  }

  /** The end of generation: whatever is left, with the remaining logprobs. */
  end(): ChoicePiece {
    const events = this.release(this.text.flush(), true);
    if (this.parser) events.push(...this.parser.end());
    return this.piece(events, true) ?? { delta: {}, logprobs: [] };
  }

  private release(piece: string, last = false): ToolEvent[] {
    if (piece) {
      this.decoded += piece.length;
      for (; this.pending < this.ends.length; this.pending++) this.ends[this.pending] = this.decoded;
    }
    let out = this.stops.push(piece);
    if (last) out += this.stops.flush();
    this.released += out.length;
    if (this.parser) return this.parser.push(out);
    this.plain += out;
    return out ? [{ type: "content", text: out }] : [];
  }

  private piece(events: ToolEvent[], last: boolean): ChoicePiece | null {
    if (!events.length && !last) return null;
    const upto = this.parser ? this.parser.consumed : this.released;
    let n = this.sent;
    if (last) n = this.ends.length;
    else while (n < this.ends.length && this.ends[n] >= 0 && this.ends[n] <= upto) n++;
    const logprobs = this.logprobs.slice(this.sent, n);
    this.sent = n;
    return { delta: deltaOf(events), logprobs };
  }
}
