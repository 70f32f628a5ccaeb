// Tool calls in Llama 3's own format, on a tiny random Llama model whose tokenizer and chat template follow
// Llama 3.1's (Dawn): the format is read from the template, tool_choice required and named force a
// `{"name": ..., "parameters": {...}}` reply that ends the turn, it parses back into OpenAI tool_calls
// (streamed too), and a call and its result go back into the prompt as the template expects.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.ts";
import type { SampledChoice } from "../art/trajectories.ts";
import { removeDir, tempDir } from "../weights/testing.ts";
import { LLAMA3_TOKENS, writeLlama3Model } from "./testing.ts";

let dir: string;
let engine: Engine;
let client: OpenAI;
const messages = [{ role: "user" as const, content: "Weather in Paris?" }];
const tools = [
  {
    type: "function" as const,
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { enum: ["Paris", "Oslo"] }, days: { type: "integer", minimum: 1, maximum: 7 } },
        required: ["city", "days"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function" as const,
    function: {
      name: "get_time",
      parameters: {
        type: "object",
        properties: { zone: { enum: ["UTC", "CET"] } },
        required: ["zone"],
        additionalProperties: false,
      },
    },
  },
];
const STOPS: number[] = [LLAMA3_TOKENS["<|end_of_text|>"], LLAMA3_TOKENS["<|eom_id|>"], LLAMA3_TOKENS["<|eot_id|>"]];

beforeAll(async () => {
  dir = await tempDir("webart-llama3-");
  await writeLlama3Model(dir);
  engine = await Engine.load(dir, { name: "llama3-tiny", kvSlots: 4, maxContext: 2048, tune: false });
  client = engine.openaiClient();
});
afterAll(async () => {
  await engine?.close();
  await removeDir(dir);
});

type Call = OpenAI.ChatCompletionMessageFunctionToolCall;

describe("Llama 3 tool calls", () => {
  it("reads the format from the chat template, which puts the tools in the first user message", () => {
    expect(engine.served[0].toolFormat).toBe("llama3_json");
    expect(engine.tokenizer.stopTokenIds.sort()).toEqual([...STOPS].sort());
    const prompt = engine.tokenizer.applyChatTemplate(messages, { tools, addGenerationPrompt: true });
    expect(prompt).toMatch(
      /^<\|begin_of_text\|><\|start_header_id\|>system<\|end_header_id\|>\n\nEnvironment: ipython/,
    );
    expect(prompt).toContain('Respond in the format {"name": function name, "parameters": dictionary');
    expect(prompt.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\n")).toBe(true);
  });

  it("tool_choice required: the reply is one JSON call with parameters, then the end of the turn", async () => {
    const r = await client.chat.completions.create({
      model: "llama3-tiny",
      messages,
      tools,
      tool_choice: "required",
      max_tokens: 120,
      temperature: 1,
      seed: 2,
      n: 4,
    });
    for (const c of r.choices) {
      expect(c.finish_reason).toBe("tool_calls");
      expect(c.message.content).toBeNull();
      expect(c.message.tool_calls).toHaveLength(1);
      const call = c.message.tool_calls![0] as Call;
      expect(["get_weather", "get_time"]).toContain(call.function.name);
      const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
      if (call.function.name === "get_weather") {
        expect(["Paris", "Oslo"]).toContain(args.city);
        expect(args.days).toBeGreaterThanOrEqual(1);
        expect(args.days).toBeLessThanOrEqual(7);
      } else expect(["UTC", "CET"]).toContain(args.zone);
      // What the model wrote: Llama's JSON (no Hermes tags), ended by one of Llama's stop tokens.
      const ids = (c as SampledChoice).token_ids!;
      expect(STOPS).toContain(ids[ids.length - 1]);
      const text = engine.tokenizer.decode(ids.slice(0, -1), { skipSpecialTokens: false });
      expect(JSON.parse(text)).toEqual({ name: call.function.name, parameters: args });
    }
  });

  it("a named tool_choice calls that tool, streamed as OpenAI streams calls", async () => {
    const req = {
      model: "llama3-tiny",
      messages,
      tools,
      tool_choice: { type: "function" as const, function: { name: "get_weather" } },
      max_tokens: 120,
      temperature: 1,
      seed: 6,
    };
    const non = await client.chat.completions.create(req);
    const call = non.choices[0].message.tool_calls![0] as Call;
    expect(call.function.name).toBe("get_weather");
    const final = await client.chat.completions.stream(req).finalChatCompletion();
    const streamed = final.choices[0].message.tool_calls![0] as Call;
    expect([final.choices[0].finish_reason, streamed.function]).toEqual(["tool_calls", call.function]);
  });

  it("sends a call and its result back as the template writes them (arguments as an object)", async () => {
    const r = await client.chat.completions.create({
      model: "llama3-tiny",
      messages,
      tools,
      tool_choice: "required",
      max_tokens: 120,
      seed: 3,
    });
    const msg = r.choices[0].message;
    const call = msg.tool_calls![0] as Call;
    const history = [...messages, msg, { role: "tool" as const, tool_call_id: call.id, content: "sunny" }];
    const next = await client.chat.completions.create({
      model: "llama3-tiny",
      messages: history,
      tools,
      max_tokens: 4,
    });
    const asObject = [
      ...messages,
      {
        ...msg,
        tool_calls: [{ ...call, function: { ...call.function, arguments: JSON.parse(call.function.arguments) } }],
      },
      history[2],
    ];
    type Render = { applyChatTemplate(m: never, o: { tools: typeof tools; addGenerationPrompt: boolean }): string };
    const render = (m: unknown[], tok: Render) =>
      engine.tokenizer.encode(tok.applyChatTemplate(m as never, { tools, addGenerationPrompt: true }), {
        addSpecialTokens: false,
      }).length;
    expect(next.usage!.prompt_tokens).toBe(render(asObject, engine.tokenizer.inner));
    // The engine's tokenizer (the trainer's too) turns the JSON-string arguments into objects itself; the template
    // alone would render them quoted.
    expect(render(history, engine.tokenizer)).toBe(render(asObject, engine.tokenizer.inner));
    expect(render(history, engine.tokenizer.inner)).not.toBe(render(asObject, engine.tokenizer.inner));
    const text = engine.tokenizer.applyChatTemplate(asObject as never, { tools });
    expect(text).toContain(`{"name": "${call.function.name}", "parameters": {`);
    expect(text).toContain("<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>");
  });
});
