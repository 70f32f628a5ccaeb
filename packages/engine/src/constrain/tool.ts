// Forced tool calls (tool_choice "required" or a named function): the output is constrained to
// `<tool_call>\n{"name": <one of the tools>, "arguments": <its parameters schema>}\n</tool_call>`, the
// Hermes/Qwen format the chat templates and the handler's parser use, or (Llama 3) to the call's JSON alone
// with "parameters" for "arguments".
import type { TokenConstraint } from "../generate/types.ts";
import { prefixMask } from "./choice.ts";
import type { Vocab } from "./vocab.ts";

const enc = new TextEncoder();

/** Only tokens whose bytes continue a fixed text (never spanning past its end). */
class Literal {
  private rest: Uint8Array;
  constructor(
    private vocab: Vocab,
    private V: number,
    text: string,
  ) {
    this.rest = enc.encode(text);
  }
  get done(): boolean {
    return this.rest.length === 0;
  }
  /** Bytes left: with the fixed text, the state. */
  get left(): number {
    return this.rest.length;
  }
  mask(): Uint32Array {
    return prefixMask(this.vocab, this.V, [this.rest], new Uint32Array(this.vocab.words));
  }
  fork(): Literal {
    const l = new Literal(this.vocab, this.V, "");
    l.rest = this.rest;
    return l;
  }
  accept(id: number): boolean {
    const b = this.vocab.bytes(id);
    if (!b || b.length > this.rest.length || b.some((x, i) => x !== this.rest[i])) return false;
    this.rest = this.rest.subarray(b.length);
    return true;
  }
}

export interface ToolSpecLike {
  function: { name: string; parameters?: Record<string, unknown> };
}

/** The schema of one call: the tool's name and its arguments (a union over tools when several). */
export function toolCallSchema(
  tools: ToolSpecLike[],
  only?: string,
  argumentsKey: "arguments" | "parameters" = "arguments",
): Record<string, unknown> {
  const pick = only ? tools.filter((t) => t.function.name === only) : tools;
  const one = (t: ToolSpecLike) => ({
    type: "object",
    properties: { name: { const: t.function.name }, [argumentsKey]: t.function.parameters ?? { type: "object" } },
    required: ["name", argumentsKey],
    additionalProperties: false,
  });
  return pick.length === 1 ? one(pick[0]) : { anyOf: pick.map(one) };
}

let toolCalls = 0;

/** literal prefix → JSON (from a JSON constraint factory) → literal suffix → end of turn. */
export function toolCallConstraint(
  vocab: Vocab,
  V: number,
  eosIds: number[],
  json: () => TokenConstraint,
): () => TokenConstraint {
  const eos = new Uint32Array(vocab.words);
  for (const id of eosIds) if (id < V) eos[id >>> 5] |= 1 << (id & 31);
  const id = ++toolCalls;
  const state = (prefix: Literal, body: TokenConstraint, suffix: Literal, failed: boolean): TokenConstraint => {
    const bodyDone = () => body.done();
    return {
      allowed() {
        if (failed) return new Uint32Array(vocab.words);
        if (!prefix.done) return prefix.mask();
        if (!bodyDone()) return body.allowed() ?? new Uint32Array(vocab.words);
        if (!suffix.done) return suffix.mask();
        return eos;
      },
      accept(id) {
        if (!prefix.done) failed ||= !prefix.accept(id);
        else if (!bodyDone()) body.accept(id);
        else if (!suffix.done) failed ||= !suffix.accept(id);
      },
      done() {
        return !failed && prefix.done && bodyDone() && suffix.done;
      },
      ...(body.fork ? { fork: () => state(prefix.fork(), body.fork!(), suffix.fork(), failed) } : {}),
      ...(body.key ? { key: () => `t${id}:${failed ? "x" : `${prefix.left},${suffix.left},${body.key!()}`}` } : {}),
    };
  };
  return () => state(new Literal(vocab, V, "<tool_call>\n"), json(), new Literal(vocab, V, "\n</tool_call>"), false);
}

/**
 * True when a schema admits exactly one value (JSON whitespace aside): a one-value enum or a const, an object whose
 * properties are all required, fixed and the only ones, or an array of fixed items with minItems = maxItems.
 */
export function isFixedSchema(schema: unknown): boolean {
  if (schema === null || typeof schema !== "object") return false;
  const s = schema as Record<string, unknown>;
  if ("const" in s) return true;
  if (Array.isArray(s.enum)) return s.enum.length === 1;
  if (s.type === "object" && s.additionalProperties === false && s.properties && typeof s.properties === "object") {
    const props = Object.entries(s.properties as Record<string, unknown>);
    const required = Array.isArray(s.required) ? s.required : [];
    return props.every(([k, v]) => required.includes(k) && isFixedSchema(v));
  }
  if (s.type === "array" && typeof s.minItems === "number" && s.minItems === s.maxItems)
    return s.minItems === 0 || isFixedSchema(s.items);
  return false;
}
