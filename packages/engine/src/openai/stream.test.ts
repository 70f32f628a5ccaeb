// Streaming as OpenAI's clients read it, on the embedded model (Dawn): every token's logprobs arrive exactly
// once (through stop strings and characters split across tokens), tool calls arrive as OpenAI streams them and
// the SDK's stream helper puts them back together, parallel_tool_calls false, and JSON-schema bounds.
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.ts";
import type { SampledChoice } from "../art/trajectories.ts";

const MODEL_DIR = join(import.meta.dirname, "../../../../models/webart-tiny");
let engine: Engine;
let client: OpenAI;
const messages = [
  { role: "system" as const, content: "You play tic-tac-toe." },
  { role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" },
];
type Req = OpenAI.ChatCompletionCreateParamsNonStreaming;

beforeAll(async () => {
  engine = await Engine.load(MODEL_DIR, { name: "tiny", kvSlots: 8, maxContext: 1024, tune: false });
  client = engine.openaiClient();
});
afterAll(() => engine.close());

async function chunksOf(req: Req): Promise<OpenAI.ChatCompletionChunk[]> {
  const out: OpenAI.ChatCompletionChunk[] = [];
  for await (const c of await client.chat.completions.create({ ...req, stream: true })) out.push(c);
  return out;
}

/** Per choice: the streamed content, logprobs (joined in order) and finish reason. */
function joined(chunks: OpenAI.ChatCompletionChunk[], index = 0) {
  const mine = chunks.flatMap((c) => c.choices.filter((ch) => ch.index === index));
  return {
    content: mine.map((c) => c.delta.content ?? "").join(""),
    logprobs: mine.flatMap((c) => c.logprobs?.content ?? []),
    perChunk: mine.map((c) => c.logprobs?.content?.length ?? 0),
    finish: mine.map((c) => c.finish_reason).find((f) => f),
  };
}

const tools = [
  {
    type: "function" as const,
    function: {
      name: "place_mark",
      description: "Place your mark",
      strict: true,
      parameters: {
        type: "object",
        properties: {
          cell: { type: "string", enum: ["A1", "A2", "B2"] },
          note: { type: "string", maxLength: 12 },
        },
        required: ["cell", "note"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function" as const,
    function: { name: "resign", parameters: { type: "object", properties: {}, additionalProperties: false } },
  },
];

describe("streamed logprobs", () => {
  const base = { model: "tiny", messages, max_tokens: 24, temperature: 1.5, seed: 77, logprobs: true, top_logprobs: 2 };

  it("arrive for every token, held back with text a stop string might still claim and sent when released", async () => {
    const plain = await client.chat.completions.create(base);
    const lp = plain.choices[0].logprobs!.content!;
    const text = plain.choices[0].message.content!;
    expect(lp.length).toBeGreaterThan(8);
    // A stop string the text starts but never finishes: the last two characters of some token in the middle.
    const cut = lp.slice(0, 8).reduce((n, t) => n + t.token.length, 0);
    const partial = text.slice(cut - 2, cut) + "\u0001";
    const held = await chunksOf({ ...base, stop: [partial] });
    const h = joined(held);
    expect(h.content).toBe(text);
    expect(h.logprobs).toEqual(lp);
    // The held token's logprob came with the chunk that released its text.
    expect(Math.max(...h.perChunk)).toBeGreaterThanOrEqual(2);

    // A stop string that matches: both answers end there, with the same logprobs up to the token that matched.
    const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
    const cutNon = await client.chat.completions.create({ ...base, stop: [stop] });
    const cutStream = joined(await chunksOf({ ...base, stop: [stop] }));
    expect(cutNon.choices[0].message.content).toBe(text.slice(0, text.indexOf(stop)));
    expect([cutStream.content, cutStream.finish]).toEqual([cutNon.choices[0].message.content, "stop"]);
    expect(cutStream.logprobs).toEqual(cutNon.choices[0].logprobs!.content);
    expect(cutStream.logprobs.length).toBeLessThan(lp.length);
  });

  it("arrive for tokens that each hold part of a character, with the bytes each token stands for", async () => {
    const schema = {
      type: "object",
      properties: { word: { enum: ["日本語", "čaj", "🎉 ok"] } },
      required: ["word"],
      additionalProperties: false,
    };
    const req = {
      ...base,
      max_tokens: 40,
      n: 3,
      response_format: { type: "json_schema" as const, json_schema: { name: "w", schema } },
    };
    const non = await client.chat.completions.create(req);
    const chunks = await chunksOf(req);
    for (const c of non.choices) {
      const s = joined(chunks, c.index);
      expect(s.content).toBe(c.message.content);
      expect(s.logprobs).toEqual(c.logprobs!.content);
      const lps = s.logprobs.slice(0, -1); // the last token ends the turn
      expect(Buffer.from(lps.flatMap((t) => t.bytes ?? []))).toEqual(Buffer.from(c.message.content!, "utf8"));
      expect([...(JSON.parse(c.message.content!) as { word: string }).word].some((ch) => ch.charCodeAt(0) > 0x7f)).toBe(
        true,
      );
      // Some token is a lone byte of a multi-byte character.
      expect(lps.some((t) => t.bytes!.length === 1 && t.bytes![0] >= 0x80)).toBe(true);
    }
  });
});

describe("streamed tool calls", () => {
  const req = { model: "tiny", messages, tools, tool_choice: "required" as const, max_tokens: 300, logprobs: true };

  it("arrive as OpenAI streams them: index, id, type and name first, then the arguments in pieces", async () => {
    const named = { ...req, seed: 5, tool_choice: { type: "function" as const, function: { name: "place_mark" } } };
    const non = await client.chat.completions.create(named);
    const call = non.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    const chunks = await chunksOf(named);
    const deltas = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
    expect(deltas[0]).toMatchObject({ index: 0, type: "function", function: { name: call.function.name } });
    expect(deltas[0].id).toMatch(/^call_/);
    expect(deltas[0].function!.arguments).toBe("");
    const rest = deltas.slice(1);
    expect(rest.every((d) => d.index === 0 && d.id === undefined && d.function?.name === undefined)).toBe(true);
    expect(rest.length).toBeGreaterThan(3);
    expect(rest.map((d) => d.function!.arguments).join("")).toBe(call.function.arguments);
    const s = joined(chunks);
    expect([s.content, s.finish]).toEqual(["", "tool_calls"]);
    expect(s.logprobs).toEqual(non.choices[0].logprobs!.content);
  });

  it("are put back together by the SDK's stream helper (finalChatCompletion, strict tools parsed)", async () => {
    const non = await client.chat.completions.create({ ...req, tool_choice: "required", seed: 4 });
    const expected = non.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    const stream = client.chat.completions.stream({ ...req, tool_choice: "required", seed: 4 });
    const done: string[] = [];
    stream.on("tool_calls.function.arguments.done", (e) => done.push(e.arguments));
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    expect(c.finish_reason).toBe("tool_calls");
    const call = c.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall & {
      function: { parsed_arguments?: unknown };
    };
    expect(call.function.name).toBe(expected.function.name);
    expect(call.function.arguments).toBe(expected.function.arguments);
    expect(done).toEqual([expected.function.arguments]);
    if (call.function.name === "place_mark")
      expect(call.function.parsed_arguments).toEqual(JSON.parse(expected.function.arguments));
    expect(c.logprobs!.content).toEqual(non.choices[0].logprobs!.content);
    expect((c as SampledChoice).token_ids).toEqual((non.choices[0] as SampledChoice).token_ids);
  });

  it("parallel_tool_calls false: one call when forcing; auto replies hold at most one", async () => {
    const forced = await client.chat.completions.create({
      ...req,
      n: 3,
      seed: 8,
      temperature: 1.5,
      parallel_tool_calls: false,
    });
    for (const c of forced.choices) expect(c.message.tool_calls!.length).toBe(1);
    const auto = await client.chat.completions.create({
      model: "tiny",
      messages,
      tools,
      max_tokens: 40,
      n: 3,
      seed: 8,
      temperature: 1.5,
      parallel_tool_calls: false,
    });
    for (const c of auto.choices) expect(c.message.tool_calls?.length ?? 0).toBeLessThanOrEqual(1);
    const bad = await client.chat.completions
      .create({ ...req, parallel_tool_calls: "no" as unknown as boolean })
      .catch((e) => e);
    expect([bad.status, bad.message]).toEqual([400, expect.stringMatching(/parallel_tool_calls: expected a boolean/)]);
  });
});

describe("JSON schema keywords", () => {
  it("enforces minimum, maximum and their exclusive forms", async () => {
    const schema = {
      type: "object",
      properties: {
        row: { type: "integer", minimum: 1, maximum: 3 },
        score: { type: "number", exclusiveMinimum: 0, maximum: 1 },
        temp: { type: "integer", minimum: -40, exclusiveMaximum: -20 },
      },
      required: ["row", "score", "temp"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 200,
      temperature: 1.5,
      seed: 12,
      n: 6,
      response_format: { type: "json_schema", json_schema: { name: "b", schema } },
    });
    for (const c of r.choices) {
      expect(c.finish_reason).toBe("stop");
      const v = JSON.parse(c.message.content!) as { row: number; score: number; temp: number };
      expect(Number.isInteger(v.row) && v.row >= 1 && v.row <= 3, c.message.content!).toBe(true);
      expect(v.score > 0 && v.score <= 1, c.message.content!).toBe(true);
      expect(Number.isInteger(v.temp) && v.temp >= -40 && v.temp < -20, c.message.content!).toBe(true);
    }
  });

  it.each([
    [{ type: "object", properties: { at: { type: "string", format: "date-time" } } }, /"format" at #\/properties\/at/],
    [{ type: "object", properties: { a: { type: "string" } }, requird: ["a"] }, /"requird" at #: is not a keyword/],
    [{ type: "array", items: { type: "integer", multipleOf: 2 } }, /"multipleOf" at #\/items/],
  ])("refuses %j with a 400 naming the keyword and its path", async (schema, msg) => {
    const err = await client.chat.completions
      .create({
        model: "tiny",
        messages,
        max_tokens: 4,
        response_format: { type: "json_schema", json_schema: { name: "x", schema } },
      })
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.message).toMatch(/^400 response_format\.json_schema\.schema: /);
    expect(err.message).toMatch(msg);
    expect(err.param).toBe("response_format");
  });

  it("refuses a forced tool whose parameters use a keyword it cannot enforce, naming the tool", async () => {
    const bad = structuredClone(tools);
    (bad[1].function.parameters as Record<string, unknown>).properties = { why: { type: "string", pattern: "^x" } };
    const err = await client.chat.completions
      .create({ model: "tiny", messages, tools: bad, tool_choice: "required", max_tokens: 4 })
      .catch((e) => e);
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/tools\[1\]\.function\.parameters: .*"pattern" at #\/properties\/why/);
    // Forcing the other tool does not compile this one.
    const ok = await client.chat.completions.create({
      model: "tiny",
      messages,
      tools: bad,
      tool_choice: { type: "function", function: { name: "place_mark" } },
      max_tokens: 300,
      seed: 1,
    });
    expect(ok.choices[0].finish_reason).toBe("tool_calls");
  });
});
