// The tool-call parser in both formats: fed in any pieces it gives the same content and calls as fed at once,
// a call's first event names it before any argument arrives, and parallel_tool_calls false stops after one.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Rng } from "@webart/gpu";
import { describe, expect, it } from "vitest";
import { Tokenizer } from "../tokenizer/index.ts";
import { LLAMA3_CHAT_TEMPLATE } from "./testing.ts";
import {
  deltaOf,
  detectToolFormat,
  firstCallOnly,
  parseToolCalls,
  ToolCallParser,
  type ToolEvent,
  type ToolFormat,
} from "./tools.ts";

/** Feeds `text` in pieces cut at `cuts`; returns the events and what the parser made of them. */
function feed(format: ToolFormat, text: string, cuts: number[], maxCalls = Infinity) {
  const p = new ToolCallParser(format, maxCalls);
  const events: ToolEvent[] = [];
  let at = 0;
  for (const c of [...cuts, text.length]) {
    events.push(...p.push(text.slice(at, c)));
    at = c;
  }
  events.push(...p.end());
  return { p, events };
}

const randomCuts = (n: number, rng: Rng) =>
  [...new Set(Array.from({ length: rng.int(n + 1) }, () => rng.int(n + 1)))].sort((a, b) => a - b);

const REPLIES: [ToolFormat, string][] = [
  [
    "hermes",
    'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}\n</tool_call>',
  ],
  [
    "hermes",
    '<tool_call>{"name":"a","arguments":{"s":"x } \\" y"}}</tool_call>\n\n<tool_call>{"arguments": {}, "name": "b"}</tool_call>',
  ],
  ["hermes", "<tool_call>{not json}</tool_call> and <tool_ca"],
  ["hermes", "plain text with  trailing space  "],
  ["hermes", '<tool_call>\n{"name": "s", "arguments": "{\\"k\\": 1}"}\n</tool_call>'],
  ["llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}'],
  ["llama3_json", '<|python_tag|>{"name": "a", "parameters": {"x": 1.5}}; {"name": "b", "parameters": {}}'],
  ["llama3_json", '  {"parameters": {"q": "t"}, "name": "late"}'],
  ["llama3_json", "The answer is {not a call}"],
  ["llama3_json", '{"city": "Paris"}'],
];

describe("tool call parser", () => {
  it("Hermes blocks and Llama JSON calls become calls with compact arguments; the rest is content", () => {
    const h = parseToolCalls(REPLIES[0][1]);
    expect(h.content).toBe("Let me check.");
    expect(h.toolCalls.map((c) => c.function)).toEqual([
      { name: "get_weather", arguments: '{"city":"Paris","days":[1,2]}' },
    ]);
    const two = parseToolCalls(REPLIES[1][1]);
    expect(two.content).toBeNull();
    expect(two.toolCalls.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ["a", '{"s":"x } \\" y"}'],
      ["b", "{}"],
    ]);
    expect(parseToolCalls(REPLIES[2][1])).toEqual({ content: REPLIES[2][1], toolCalls: [] });
    expect(parseToolCalls(REPLIES[3][1]).content).toBe(REPLIES[3][1]);
    expect(parseToolCalls(REPLIES[4][1]).toolCalls[0].function.arguments).toBe('{"k": 1}');
    const l = parseToolCalls(REPLIES[5][1], "llama3_json");
    expect([l.content, l.toolCalls[0].function]).toEqual([
      null,
      { name: "get_weather", arguments: '{"city":"Paris"}' },
    ]);
    const lp = parseToolCalls(REPLIES[6][1], "llama3_json");
    expect(lp.toolCalls.map((c) => [c.function.name, c.function.arguments])).toEqual([
      ["a", '{"x":1.5}'],
      ["b", "{}"],
    ]);
    expect(parseToolCalls(REPLIES[7][1], "llama3_json").toolCalls[0].function).toEqual({
      name: "late",
      arguments: '{"q":"t"}',
    });
    // A reply that does not start with a call, or JSON that is not one, is content.
    for (const text of [REPLIES[8][1], REPLIES[9][1]])
      expect(parseToolCalls(text, "llama3_json")).toEqual({ content: text, toolCalls: [] });
    // In Hermes form, Llama's JSON is just text (and the other way round).
    expect(parseToolCalls(REPLIES[5][1]).toolCalls).toEqual([]);
    expect(parseToolCalls(REPLIES[0][1], "llama3_json").toolCalls).toEqual([]);
  });

  it("gives the same content and calls whichever pieces the text arrives in", () => {
    const rng = new Rng(11);
    for (const [format, text] of REPLIES) {
      const whole = parseToolCalls(text, format);
      for (let run = 0; run < 60; run++) {
        const cuts = run < text.length ? [run] : randomCuts(text.length, rng);
        const { p, events } = feed(format, text, cuts);
        const content = p.calls.length && !p.content ? null : p.content;
        expect([content, p.calls.map((c) => c.function)], `${text} cut at ${cuts}`).toEqual([
          whole.content,
          whole.toolCalls.map((c) => c.function),
        ]);
        expect(p.consumed, "every character accounted for").toBe(text.length);
        // A call is announced (index, id, name) before any of its arguments.
        const seen = new Set<number>();
        for (const e of events)
          if (e.type === "call") seen.add(e.index);
          else if (e.type === "arguments") expect(seen.has(e.index)).toBe(true);
      }
    }
  });

  it("streams the name first and the arguments in pieces as they arrive", () => {
    const text = REPLIES[0][1];
    const p = new ToolCallParser("hermes");
    const deltas = [...text].map((ch) => deltaOf(p.push(ch))).filter((d) => Object.keys(d).length);
    deltas.push(deltaOf(p.end()));
    const calls = deltas.flatMap((d) => d.tool_calls ?? []);
    expect(calls[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(typeof calls[0].id).toBe("string");
    const pieces = calls.slice(1).map((c) => (c.function as { arguments: string }).arguments);
    expect(pieces.length).toBeGreaterThan(10);
    expect(pieces.join("")).toBe('{"city":"Paris","days":[1,2]}');
    expect(calls.slice(1).every((c) => c.index === 0 && c.id === undefined)).toBe(true);
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("Let me check.");
  });

  it("keeps the arguments written so far when the generation stops inside a call", () => {
    const { p } = feed("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": [1, 2', [20]);
    expect([p.incomplete, p.calls[0].function]).toEqual([true, { name: "f", arguments: '{"a":[1,2' }]);
  });

  it("parallel_tool_calls false: nothing after the first call", () => {
    const { p } = feed("hermes", REPLIES[1][1], [5, 40], 1);
    expect(p.calls.map((c) => c.function.name)).toEqual(["a"]);
    const l = feed("llama3_json", REPLIES[6][1], [30], 1);
    expect(l.p.calls.map((c) => c.function.name)).toEqual(["a"]);
  });

  it("reads the format from the chat template", () => {
    const tiny = JSON.parse(
      readFileSync(join(import.meta.dirname, "../../../../models/webart-tiny/tokenizer_config.json"), "utf8"),
    ) as { chat_template: string };
    expect(detectToolFormat(tiny.chat_template)).toBe("hermes");
    expect(detectToolFormat(LLAMA3_CHAT_TEMPLATE)).toBe("llama3_json");
    expect(detectToolFormat([{ template: LLAMA3_CHAT_TEMPLATE }])).toBe("llama3_json");
    expect(detectToolFormat(null)).toBe("hermes");
  });
});

describe("firstCallOnly", () => {
  const dir = join(import.meta.dirname, "../../../../models/webart-tiny");
  const load = (f: string) => JSON.parse(readFileSync(join(dir, f), "utf8")) as object;
  const tok = Tokenizer.fromJSON(load("tokenizer.json"), load("tokenizer_config.json"));
  const stop = [tok.tokenToId("<|im_end|>")!];
  const decode = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: true });

  it("lets anything through until the first call is closed, then only the end of the turn", () => {
    const c = firstCallOnly("hermes", decode, stop, 406)();
    const first = 'Sure.\n<tool_call>\n{"name": "a", "arguments": {"x": "é"}}\n</tool_call>';
    const ids = tok.encode(first + '\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>');
    for (let i = 0; i < ids.length; i++) {
      const text = decode(ids.slice(0, i));
      const m = c.allowed();
      if (text.length >= first.length) {
        // The first call is closed: only <|im_end|> from here on.
        expect(text).toBe(first);
        expect([...Array(406).keys()].filter((k) => (m![k >>> 5] >>> (k & 31)) & 1)).toEqual(stop);
        return;
      }
      expect(m, `at ${JSON.stringify(text)}`).toBeNull();
      c.accept(ids[i]);
    }
    throw new Error("the constraint never closed");
  });
});
