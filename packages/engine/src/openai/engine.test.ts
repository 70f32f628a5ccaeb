// The official `openai` package against the engine's handler (in-process fetch), on the embedded model.
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rng } from "@webart/gpu";
import { Engine } from "../engine.ts";
import { ModelRunner } from "../model/runner.ts";
import { decodeAllowed } from "../art/allowed.ts";
import type { SampledChoice } from "../art/trajectories.ts";
import {
  deviceKey,
  tuneTable,
  matmulVariant,
  matvecVariant,
  rowThreads,
  attentionVariant,
  tileProfile,
  loraLayout,
  rmsnormVariant,
} from "@webart/shaders";

const MODEL_DIR = join(import.meta.dirname, "../../../../models/webart-tiny");
let engine: Engine;
let client: OpenAI;
const messages = [
  { role: "system" as const, content: "You play tic-tac-toe." },
  { role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" },
];

beforeAll(async () => {
  engine = await Engine.load(MODEL_DIR, { name: "tiny", kvSlots: 8, maxContext: 1024 });
  client = engine.openaiClient();
});
afterAll(() => engine.close());

it("Engine.load timed every kernel choice for the model's shapes on this device, and the model runs the winners", () => {
  // Tuning's scratch buffers were given back to the device: everything allocated is in use.
  expect(engine.gpu.pool.stats.allocatedBytes).toBe(engine.gpu.pool.stats.liveBytes);
  const c = engine.config;
  const tuning = engine.model.tuning;
  const shape = `H=${c.numHeads},KV=${c.numKvHeads},D=${c.headDim}`;
  const keys: [string, string | undefined][] = [
    ["matmul.nt.f32@", tuning.matmul?.["nt.f32"]],
    ["matmul.nn.f32@", tuning.matmul?.["nn.f32"]],
    ["matvec.f32@", tuning.matvec?.f32],
    [`sample.threads@V=${c.vocabSize}`, String(tuning.sample?.threads)],
    ["logprobs.threads@", String(tuning.logprobs?.threads)],
    [`lora.layout@C=${c.hiddenSize}`, tuning.lora?.layout],
    [`rmsnorm.layout@C=${c.hiddenSize}`, tuning.rmsnorm?.layout],
    [`rope.layout@${shape}`, tuning.rope?.layout],
  ];
  for (const use of ["train", "decode"] as const) {
    const family = engine.gpu.tuning.get(`attention.${use}@${shape}`);
    expect(family, use).toBeDefined();
    expect(tuning.attention?.[use]?.variant).toBe(family!.winner === "rows" ? "rows" : "tiled");
    if (family!.winner !== "rows")
      keys.push([`attention.${use}.tiles@${shape}`, `tiled-${tuning.attention?.[use]?.profile}`]);
  }
  for (const [prefix, chosen] of keys) {
    const key = [...engine.gpu.tuning.keys()].find((k) => k.startsWith(prefix));
    expect(key, prefix).toBeDefined();
    const entry = engine.gpu.tuning.get(key!)!;
    expect(Object.keys(entry.ms).length, prefix).toBeGreaterThan(1); // every variant was timed
    expect(entry.winner).toBe(Object.entries(entry.ms).sort((a, b) => a[1] - b[1])[0][0]);
    expect(chosen, prefix).toBe(entry.winner);
  }
  // The rows up to which decode runs matvecs: half the first row count (16, 32, 64) where the matmul won, else 64.
  const rows = [...engine.gpu.tuning.entries()].filter(([k]) => k.startsWith(`decode.rows@`));
  expect(rows.length).toBeGreaterThan(0);
  const lost = rows.findIndex(([, e]) => e.winner === "matmul");
  expect(tuning.decodeRows).toBe(lost < 0 ? 64 : [16, 32, 64][lost] / 2);
  expect(engine.model.decodeRows).toBe(tuning.decodeRows);
  // What the kernels then run.
  expect(matmulVariant(engine.gpu, "nt", "f32", tuning.matmul)).toBe(tuning.matmul?.["nt.f32"]);
  expect(matvecVariant(engine.gpu, "f32", tuning.matvec)).toBe(tuning.matvec?.f32);
  expect(rowThreads(engine.gpu, tuning.sample)).toBe(tuning.sample?.threads);
  expect(attentionVariant(engine.gpu, c.headDim, "decode", tuning.attention)).toBe(tuning.attention?.decode?.variant);
  expect(tileProfile(engine.gpu, "train", tuning.attention)).toBe(tuning.attention?.train?.profile);
  expect(loraLayout(engine.gpu, tuning.lora)).toBe(tuning.lora?.layout);
  const rms = rmsnormVariant(engine.gpu, c.hiddenSize, { tuning: tuning.rmsnorm });
  expect(rms.wg).toBe(tuning.rmsnorm?.layout === "cpu" ? 64 : 256);
  // The table for persisting names this device.
  expect(Object.keys(tuneTable(engine.gpu)).every((k) => k.startsWith(`${deviceKey(engine.gpu)}|`))).toBe(true);
});

describe("chat.completions through the openai SDK", () => {
  it("lists the model, retrieves it by id, and answers an unknown id with a 404 in OpenAI's shape", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny"]);
    expect(await client.models.retrieve("tiny")).toEqual(models.data[0]);
    const err = await client.models.retrieve("nope").catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect([err.code, err.type]).toEqual(["model_not_found", "not_found_error"]);
    expect(err.message).toMatch(/`nope` does not exist \(available: tiny\)/);
  });

  it("treats a developer message as the system message (OpenAI's newer role)", async () => {
    const req = { model: "tiny", max_tokens: 6, temperature: 0 };
    const sys = await client.chat.completions.create({ ...req, messages });
    const dev = await client.chat.completions.create({
      ...req,
      messages: [{ role: "developer", content: messages[0].content }, messages[1]],
    });
    // Token for token the same prompt: the developer request finds all of it (but the last token, which is
    // always fed) in the KV cache the system request left, and decodes the same greedy reply.
    expect(dev.usage!.prompt_tokens).toBe(sys.usage!.prompt_tokens);
    expect(dev.usage!.prompt_tokens_details!.cached_tokens).toBe(sys.usage!.prompt_tokens - 1);
    expect((dev.choices[0] as SampledChoice).token_ids).toEqual((sys.choices[0] as SampledChoice).token_ids);
  });

  it("answers, with the sampled token ids and logprobs on the choice", async () => {
    const r = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 12,
      temperature: 1,
      seed: 7,
      logprobs: true,
      top_logprobs: 3,
    });
    const c = r.choices[0] as SampledChoice;
    expect(r.object).toBe("chat.completion");
    expect(["stop", "length"]).toContain(c.finish_reason);
    expect(c.token_ids!.length).toBeGreaterThan(0);
    expect(c.token_ids!.length).toBeLessThanOrEqual(12);
    expect(r.usage!.completion_tokens).toBe(c.token_ids!.length);
    expect(r.usage!.prompt_tokens).toBeGreaterThan(20);
    const lp = c.logprobs!.content!;
    expect(lp.map((x) => x.logprob)).toEqual(c.token_logprobs!.map((x) => x));
    for (const t of lp) {
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs.length).toBe(3);
      const tops = t.top_logprobs.map((x) => x.logprob);
      expect([...tops].sort((a, b) => b - a)).toEqual(tops);
      // The sampled token is at most as likely as the most likely one (same softmax, same numbers).
      expect(t.logprob).toBeLessThanOrEqual(tops[0] + 1e-5);
    }
    if (c.finish_reason === "length") expect(c.token_ids!.length).toBe(12);
  });

  it("replays exactly with the same seed, and streams the same text", async () => {
    const req = { model: "tiny", messages, max_tokens: 10, temperature: 1, seed: 1234 };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    expect((b.choices[0] as SampledChoice).token_ids).toEqual((a.choices[0] as SampledChoice).token_ids);
    const stream = await client.chat.completions.create({
      ...req,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null = null;
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      for (const ch of chunk.choices) {
        text += ch.delta.content ?? "";
        finish = ch.finish_reason ?? finish;
      }
    }
    expect(text).toBe(a.choices[0].message.content);
    expect(finish).toBe(a.choices[0].finish_reason);
    // include_usage: one last chunk with no choices carries the usage, as the non-streaming answer counts it.
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({
      prompt_tokens: a.usage!.prompt_tokens,
      completion_tokens: a.usage!.completion_tokens,
      total_tokens: a.usage!.total_tokens,
    });
    // The third request with this prompt: all of it but the last token comes from the KV cache.
    expect(last.usage!.prompt_tokens_details!.cached_tokens).toBe(a.usage!.prompt_tokens - 1);
    expect(chunks.slice(0, -1).every((c) => !c.usage && c.choices.length === 1)).toBe(true);
    // Without it, no chunk carries usage.
    const plain = await client.chat.completions.create({ ...req, stream: true });
    for await (const chunk of plain) expect([chunk.usage, chunk.choices.length]).toEqual([undefined, 1]);
  });

  it("samples n choices that share the prompt, each seeded on its own stream", async () => {
    const r = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 8,
      temperature: 1.5,
      seed: 3,
      n: 4,
    });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const ids = r.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    expect(new Set(ids).size).toBeGreaterThan(1);
    const greedy = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 8,
      temperature: 0,
      n: 3,
    });
    const g = greedy.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    expect(new Set(g).size).toBe(1);
    // A single greedy request decodes the same tokens as each of the n greedy samples.
    const one = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, temperature: 0 });
    expect(JSON.stringify((one.choices[0] as SampledChoice).token_ids)).toBe(g[0]);
  });

  it("sampling split over workgroups (GPUs' tuned choice) decodes what one workgroup a row decodes", async () => {
    const tuning = engine.model.tuning;
    const before = tuning.sample;
    const req = { model: "tiny", messages, max_tokens: 8, seed: 5 };
    const ids = (r: OpenAI.ChatCompletion) => r.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    const one = [
      await client.chat.completions.create({ ...req, temperature: 0 }),
      await client.chat.completions.create({ ...req, temperature: 0.8, n: 3 }),
    ];
    try {
      tuning.sample = { threads: before?.threads ?? 8, split: 4 };
      expect(ids(await client.chat.completions.create({ ...req, temperature: 0 }))).toEqual(ids(one[0]));
      // Same seeds and steps, so the same uniform draws: the same tokens unless one lands within f32 rounding of a
      // CDF step (the vocabulary is small here, so steps are wide).
      expect(ids(await client.chat.completions.create({ ...req, temperature: 0.8, n: 3 }))).toEqual(ids(one[1]));
    } finally {
      tuning.sample = before;
    }
  });

  it("queues n larger than the KV slots (8) in parts: sample k is the same whichever part it runs in", async () => {
    const req = { model: "tiny", messages, max_tokens: 5, temperature: 1.5, seed: 21 };
    const ids = (r: OpenAI.ChatCompletion) => r.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    const eight = await client.chat.completions.create({ ...req, n: 8 });
    const twenty = await client.chat.completions.create({ ...req, n: 20 });
    expect(twenty.choices.map((c) => c.index)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(ids(twenty).slice(0, 8)).toEqual(ids(eight));
    expect(new Set(ids(twenty).slice(8)).size).toBeGreaterThan(1);
    const completion = twenty.choices.reduce((a, c) => a + (c as SampledChoice).token_ids!.length, 0);
    expect(twenty.usage).toMatchObject({ prompt_tokens: eight.usage!.prompt_tokens, completion_tokens: completion });
    // Streamed, each choice's text arrives under its own index.
    const stream = await client.chat.completions.create({ ...req, n: 20, stream: true });
    const text = Array.from({ length: 20 }, () => "");
    for await (const chunk of stream) for (const c of chunk.choices) text[c.index] += c.delta.content ?? "";
    expect(text).toEqual(twenty.choices.map((c) => c.message.content));
  });

  it("serves concurrent requests in one batch with the same results as one at a time", async () => {
    const reqs = [11, 12, 13, 14, 15].map((seed) => ({ model: "tiny", messages, max_tokens: 6, temperature: 1, seed }));
    const alone: string[] = [];
    for (const q of reqs)
      alone.push(JSON.stringify(((await client.chat.completions.create(q)).choices[0] as SampledChoice).token_ids));
    const steps0 = engine.scheduler.stats.steps;
    const together = await Promise.all(reqs.map((q) => client.chat.completions.create(q)));
    expect(together.map((r) => JSON.stringify((r.choices[0] as SampledChoice).token_ids))).toEqual(alone);
    // Batched: far fewer engine steps than 5 requests x (prefill + 6 tokens) one after another.
    expect(engine.scheduler.stats.steps - steps0).toBeLessThan(5 * 7);
  });

  it("replays decode steps, constrained or free, with the tokens recorded steps give, and lets the tape go when idle", async () => {
    const runner = engine.runner;
    const schema = {
      type: "object",
      properties: { move: { type: "string", enum: ["A1", "B2", "C3"] }, notes: { type: "string", maxLength: 12 } },
      required: ["move", "notes"],
      additionalProperties: false,
    };
    const run = () =>
      Promise.all([
        client.chat.completions.create({ model: "tiny", messages, max_tokens: 24, temperature: 1, seed: 3, n: 2 }),
        client.chat.completions.create({
          model: "tiny",
          messages,
          max_tokens: 60,
          temperature: 1,
          seed: 4,
          response_format: { type: "json_schema", json_schema: { name: "move", schema, strict: true } },
        }),
      ]).then((rs) => rs.flatMap((r) => r.choices.map((c) => (c as SampledChoice).token_ids)));
    const active0 = engine.gpu.memory.byTag.activations ?? 0;
    runner.replay = false;
    const recorded = await run();
    runner.replay = true;
    const before = { ...runner.tapeStats };
    const replayed = await run();
    expect(replayed).toEqual(recorded);
    const [replays, captures] = [
      runner.tapeStats.replays - before.replays,
      runner.tapeStats.captures - before.captures,
    ];
    expect(replays).toBeGreaterThan(3 * captures);
    // No request runs: the tape went with the last one, and nothing it held is live.
    expect(engine.gpu.memory.byTag.activations ?? 0).toBe(active0);
  });

  it("reuses the KV cache of an earlier turn when the new prompt extends it", async () => {
    const first = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 5, temperature: 0 });
    const next = await client.chat.completions.create({
      model: "tiny",
      messages: [
        ...messages,
        { role: "assistant", content: first.choices[0].message.content ?? "" },
        { role: "user", content: "Again?" },
      ],
      max_tokens: 5,
      temperature: 0,
    });
    expect(next.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(20);
  });

  it("returns JSON that parses and fits a json_schema, even from a tiny model", async () => {
    const schema = {
      type: "object",
      properties: {
        move: { type: "string", enum: ["A1", "B2", "C3"] },
        confidence: { type: "number" },
        notes: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 2 },
      },
      required: ["move", "confidence", "notes"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model: "tiny",
      messages,
      max_tokens: 600,
      temperature: 1,
      seed: 9,
      n: 2,
      response_format: { type: "json_schema", json_schema: { name: "move", schema, strict: true } },
    });
    for (const c of r.choices) {
      expect(c.finish_reason).toBe("stop");
      const v = JSON.parse(c.message.content!);
      expect(["A1", "B2", "C3"]).toContain(v.move);
      expect(typeof v.confidence).toBe("number");
      expect(Array.isArray(v.notes) && v.notes.length <= 2).toBe(true);
      // The sample ends with the end-of-turn token, as training needs.
      const ids = (c as SampledChoice).token_ids!;
      expect(engine.tokenizer.stopTokenIds).toContain(ids[ids.length - 1]);
    }
  });

  it("guided_choice (vLLM's): each sample is one of the choices; a forced choice keeps the model's own logprobs", async () => {
    const ask = (extra: Record<string, unknown>) =>
      client.chat.completions.create({ model: "tiny", messages, max_tokens: 20, logprobs: true, ...extra });
    const free = (await ask({ temperature: 0 })).choices[0] as SampledChoice;
    const reply = free.message.content!;
    const other = reply === "<move>C3</move>" ? "<move>A1</move>" : "<move>C3</move>";
    // Greedy within the choices is the free greedy reply when it is among them: same tokens, same logprobs.
    const same = (await ask({ temperature: 0, guided_choice: [other, reply] })).choices[0] as SampledChoice;
    expect(same.message.content).toBe(reply);
    expect(same.token_ids).toEqual(free.token_ids);
    expect(same.token_logprobs).toEqual(free.token_logprobs);
    expect(same.forced).toBeUndefined(); // sampled among two choices
    // One choice forces it, ending with the end-of-turn token as training needs; its logprobs are the model's over
    // the whole vocabulary, so the forced text is less likely than the greedy one.
    const forced = (await ask({ temperature: 1, seed: 3, guided_choice: [other] })).choices[0] as SampledChoice;
    expect(forced.message.content).toBe(other);
    expect(forced.finish_reason).toBe("stop");
    expect(forced.forced).toBe(true); // training leaves it out of the KL term
    expect(engine.tokenizer.stopTokenIds).toContain(forced.token_ids!.at(-1));
    const sum = (c: SampledChoice) => c.token_logprobs!.reduce((a, b) => a + b, 0);
    expect(forced.token_logprobs!.every((x) => Number.isFinite(x) && x <= 0)).toBe(true);
    expect(sum(forced)).toBeLessThan(sum(free));
    expect(forced.token_allowed).toBeUndefined(); // trained as forced, not over a set
    expect(free.token_allowed).toBeUndefined(); // nothing was masked
    const choices = ["<move>A1</move>", "<move>B2</move>", "<move>C3</move>", "pass"];
    const r = await ask({ temperature: 1.5, seed: 11, n: 12, guided_choice: choices });
    for (const c of r.choices) expect(choices).toContain(c.message.content);
    // Sampled among several: each token comes with the set it was drawn from, which holds it, and where the prefix
    // fixes the next token the set is that token alone (then the end of turn: the stop tokens).
    const V = engine.config.vocabSize;
    const has = (m: Uint32Array, id: number) => (m[id >>> 5] & (1 << (id & 31))) !== 0;
    const count = (m: Uint32Array) => [...Array(V).keys()].filter((id) => has(m, id)).length;
    for (const c of r.choices as SampledChoice[]) {
      const sets = decodeAllowed(c.token_allowed!, c.token_ids!.length, "choice", Math.ceil(V / 32));
      c.token_ids!.forEach((id, k) => expect(has(sets[k]!, id)).toBe(true));
      expect(count(sets[0]!)).toBeGreaterThan(1); // "<" or "p": a choice among the strings
      expect(count(sets[0]!)).toBeLessThan(V / 4);
      const end = sets.at(-1)!;
      expect([...Array(V).keys()].filter((id) => has(end, id))).toEqual(
        engine.tokenizer.stopTokenIds.filter((id) => id < V).sort((x, y) => x - y),
      );
    }
    const bad = await ask({ guided_choice: ["A1", 3] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as Error).message).toMatch(/guided_choice: expected a non-empty array of non-empty strings/);
    const both = await ask({ guided_choice: ["A1"], response_format: { type: "json_object" } }).catch(
      (e: unknown) => e,
    );
    expect((both as Error).message).toMatch(/guided_choice cannot be combined with a JSON response_format/);
  });

  it("round-trips a forced tool call and its result", async () => {
    const tools = [
      {
        type: "function" as const,
        function: {
          name: "place_mark",
          description: "Place your mark",
          parameters: {
            type: "object",
            properties: { cell: { type: "string", enum: ["A1", "A2", "B2"] } },
            required: ["cell"],
            additionalProperties: false,
          },
        },
      },
      {
        type: "function" as const,
        function: { name: "resign", parameters: { type: "object", properties: {}, additionalProperties: false } },
      },
    ];
    const ask = (extra: object) =>
      client.chat.completions.create({
        model: "tiny",
        messages,
        tools,
        tool_choice: "required",
        max_tokens: 300,
        temperature: 1,
        ...extra,
      } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    const r = await ask({ seed: 4 });
    const c = r.choices[0];
    expect(c.finish_reason).toBe("tool_calls");
    const call = c.message.tool_calls![0];
    expect(call.type).toBe("function");
    const fn = (call as { function: { name: string; arguments: string } }).function;
    expect(["place_mark", "resign"]).toContain(fn.name);
    const args = JSON.parse(fn.arguments);
    if (fn.name === "place_mark") expect(["A1", "A2", "B2"]).toContain(args.cell);
    const named = await ask({ tool_choice: { type: "function", function: { name: "place_mark" } }, seed: 5 });
    expect((named.choices[0].message.tool_calls![0] as { function: { name: string } }).function.name).toBe(
      "place_mark",
    );
    // guided_tools narrow the forced call (here to one cell and one tool) while the prompt shows the tools.
    const narrow = [
      {
        ...tools[0],
        function: {
          ...tools[0].function,
          parameters: { ...tools[0].function.parameters, properties: { cell: { type: "string", enum: ["B2"] } } },
        },
      },
    ];
    const [plain, guided] = await Promise.all([ask({ seed: 6 }), ask({ seed: 6, guided_tools: narrow })]);
    const gc = guided.choices[0].message.tool_calls![0] as { function: { name: string; arguments: string } };
    expect([gc.function.name, JSON.parse(gc.function.arguments)]).toEqual(["place_mark", { cell: "B2" }]);
    expect(guided.usage!.prompt_tokens).toBe(plain.usage!.prompt_tokens);
    const sampled = guided.choices[0] as SampledChoice;
    expect([sampled.forced, typeof sampled.token_allowed]).toEqual([undefined, "object"]);
    // Named, with guided parameters that admit one value: the call is forced (trained only toward, no KL term).
    const fixed = await ask({
      tool_choice: { type: "function", function: { name: "place_mark" } },
      guided_tools: narrow,
    });
    const fc = fixed.choices[0] as SampledChoice;
    expect(JSON.parse((fc.message.tool_calls![0] as { function: { arguments: string } }).function.arguments)).toEqual({
      cell: "B2",
    });
    expect([fc.forced, fc.token_allowed]).toEqual([true, undefined]);
    expect(fc.token_logprobs!.every((x) => Number.isFinite(x) && x <= 0)).toBe(true);
    const wrong = await ask({
      tool_choice: { type: "function", function: { name: "resign" } },
      seed: 6,
      guided_tools: narrow,
    }).catch((e: unknown) => e);
    expect((wrong as Error).message).toMatch(
      /guided_tools: the tool_choice names "resign", which guided_tools leaves out/,
    );
    // The tool's result goes back and the model answers (auto: it may call again or reply).
    const next = await client.chat.completions.create({
      model: "tiny",
      messages: [...messages, c.message, { role: "tool", tool_call_id: call.id, content: "ok, placed" }],
      tools,
      max_tokens: 8,
      temperature: 0,
    });
    expect(next.choices[0].message.role).toBe("assistant");
    expect(next.usage!.prompt_tokens).toBeGreaterThan(r.usage!.prompt_tokens);
  });

  it.each([
    [
      {
        response_format: {
          type: "json_schema",
          json_schema: { name: "x", schema: { type: "string", pattern: "^a+$" } },
        },
      },
      400,
      /pattern/,
    ],
    [{ model: "nope" }, 404, /does not exist/],
    [{ temperature: 5 }, 400, /temperature/],
    [{ max_tokens: 10_000 }, 400, /maximum context length/],
    [{ messages: [{ role: "user", content: "x ".repeat(1200) }] }, 400, /maximum context length/],
    [{ n: 0 }, 400, /n: 0/],
  ])("rejects bad input %j with OpenAI's error shape", async (extra, status, msg) => {
    const err = await client.chat.completions
      .create({ model: "tiny", messages, max_tokens: 4, ...(extra as object) } as never)
      .catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(status);
    expect(err.message).toMatch(msg);
  });
});

it("the generator refuses prompt ids the model has no embedding row for, naming the id and the vocabulary", async () => {
  const V = engine.config.vocabSize;
  const req = {
    n: 1,
    maxTokens: 2,
    sampling: { temperature: 0, topP: 1, topK: 0, seed: 0 },
    stopTokenIds: [],
    topLogprobs: 0,
  };
  await expect(engine.generator.generate({ ...req, promptIds: [1, V] })).rejects.toThrow(
    `generate: prompt token id ${V} is outside the model's vocabulary [0, ${V}); remove that token`,
  );
  const ok = await engine.generator.generate({ ...req, promptIds: [1, V - 1] });
  expect(ok.samples[0].tokenIds.length).toBeGreaterThan(0);
});

it("free text decodes 8 steps in a row with the tokens and logprobs of one step at a time", async () => {
  // A short context, so some samples end at its limit inside a run; stop strings end others inside one.
  const opts = { name: "tiny", kvSlots: 4, maxContext: 96 };
  const [ahead, single] = await Promise.all([
    Engine.load(MODEL_DIR, opts),
    Engine.load(MODEL_DIR, { ...opts, decodeAhead: 1 }),
  ]);
  try {
    const reqs = [
      { max_tokens: 3, seed: 1 },
      { max_tokens: 13, seed: 2, n: 3 },
      { max_tokens: 46, seed: 3, n: 2 }, // up to the end of the context (50 prompt tokens)
      { max_tokens: 30, seed: 4, stop: ["\n", " "] },
      { max_tokens: 20, seed: 5, temperature: 0 },
    ];
    const run = async (e: Engine) => {
      const c = e.openaiClient();
      const out: unknown[] = [];
      for (const r of reqs) {
        const res = await c.chat.completions.create({ model: "tiny", messages, temperature: 1.2, ...r });
        out.push(
          res.choices.map((ch) => {
            const s = ch as SampledChoice;
            return [s.token_ids, s.token_logprobs, ch.finish_reason, ch.message.content];
          }),
        );
      }
      // Concurrent requests batch into one run.
      const together = await Promise.all(
        [6, 7, 8].map((seed) => c.chat.completions.create({ model: "tiny", messages, max_tokens: 9, seed })),
      );
      out.push(together.map((r) => (r.choices[0] as SampledChoice).token_ids));
      return out;
    };
    const [a, b] = [await run(ahead), await run(single)];
    expect(a).toEqual(b);
    const finishes = JSON.stringify(a);
    expect(finishes).toContain('"length"');
    expect(finishes).toContain('"stop"');
    expect(ahead.scheduler.stats.decodeRuns).toBeGreaterThan(5);
    expect(single.scheduler.stats.decodeRuns).toBe(0);
    // The steps whose tokens were kept count one by one: as many as one step at a time took. Runs go on past a
    // stop until their end (those steps are dropped).
    expect(ahead.scheduler.stats.steps).toBe(single.scheduler.stats.steps);
    expect(ahead.scheduler.stats.stepsDropped).toBeGreaterThan(0);
    expect(single.scheduler.stats.stepsDropped).toBe(0);
    // Each run waits on one readback: a call of the model, as a single step is.
    expect(single.scheduler.stats.rounds).toBe(single.scheduler.stats.steps);
    const { steps, stepsDropped, decodeRuns, rounds } = ahead.scheduler.stats;
    expect(rounds).toBeLessThan(steps / 2);
    expect(rounds).toBeGreaterThan(decodeRuns);
    expect(steps + stepsDropped).toBeGreaterThan(rounds + 4 * decodeRuns); // runs of more than 5 steps on average
  } finally {
    await Promise.all([ahead.close(), single.close()]);
  }
});

it("masks given as functions are worked out while the device runs the forward, and sample as given masks do", async () => {
  const V = engine.config.vocabSize;
  const words = Math.ceil(V / 32);
  const rng = new Rng(9);
  const tokens = {
    ids: Uint32Array.from({ length: 12 }, () => rng.int(V)),
    slots: Uint32Array.from({ length: 12 }, (_, i) => (i < 6 ? 0 : 1)),
    pos: Uint32Array.from({ length: 12 }, (_, i) => i % 6),
  };
  const masks = [0, 1].map(() => Uint32Array.from({ length: words }, () => rng.int(0x100000000)));
  const spec = (row: number, b: number) => ({
    row,
    temperature: 1,
    topK: 0,
    topP: 1,
    seed: 3,
    step: 0,
    stream: b,
    top: 0,
  });
  const run = async (lazy: boolean) => {
    const runner = new ModelRunner(engine.model, 2, 16);
    runner.overlapMasks = true; // off by default on a CPU device
    let asked = 0;
    try {
      return await runner.step(
        tokens,
        [5, 11].map((row, b) => ({
          ...spec(row, b),
          mask: lazy ? () => (asked++, masks[b]) : masks[b],
        })),
      );
    } finally {
      runner.dispose();
      if (lazy) expect(asked).toBe(2);
    }
  };
  const [eager, lazy] = [await run(false), await run(true)];
  expect(lazy.ids).toEqual(eager.ids);
  expect(lazy.logprobs).toEqual(eager.logprobs);
  for (const [b, id] of lazy.ids.entries()) expect((masks[b][id >>> 5] >>> (id & 31)) & 1).toBe(1);
});

it("a step that fails while it is encoded (a mask that throws) leaves no recorder open and no buffer live", async () => {
  const gpu = engine.gpu;
  const V = engine.config.vocabSize;
  const tokens = { ids: Uint32Array.of(1, 2, 3), slots: Uint32Array.of(0, 0, 0), pos: Uint32Array.of(0, 1, 2) };
  const spec = { row: 2, temperature: 1, topK: 0, topP: 1, seed: 1, step: 0, stream: 0, top: 0, mask: null };
  for (const overlap of [false, true]) {
    const runner = new ModelRunner(engine.model, 1, 16);
    runner.overlapMasks = overlap;
    await runner.step(tokens, [spec]); // pipelines built, the cache written once
    const live = gpu.memory.liveBytes;
    const failing = {
      ...spec,
      mask: () => {
        throw new Error("constraint failed");
      },
    };
    await expect(runner.step(tokens, [failing])).rejects.toThrow(/constraint failed/);
    expect(gpu.pool.openRecorders).toBe(0);
    expect(gpu.memory.liveBytes).toBe(live);
    // The runner goes on: the next step samples as before.
    const r = await runner.step(tokens, [spec]);
    expect(r.ids[0]).toBeLessThan(V);
    runner.dispose();
  }
  // Slot copies recorded into the dropped step wait for the next one: slot 1 then holds slot 0's rows.
  const runner = new ModelRunner(engine.model, 2, 16);
  await runner.step(tokens, [spec]);
  runner.copySlot(0, 1, 3);
  const next = (slot: number) => ({ ids: Uint32Array.of(4), slots: Uint32Array.of(slot), pos: Uint32Array.of(3) });
  const throwing = () => {
    throw new Error("constraint failed");
  };
  await expect(runner.step(next(1), [{ ...spec, row: 0, mask: throwing }])).rejects.toThrow(/constraint failed/);
  const copied = await runner.step(next(1), [{ ...spec, row: 0 }]);
  const original = await runner.step(next(0), [{ ...spec, row: 0 }]);
  expect(copied.logprobs).toEqual(original.logprobs);
  expect(copied.ids).toEqual(original.ids);
  runner.dispose();
});

describe("Engine.close", () => {
  it("fails queued requests, frees the weights, KV cache and adapter on the GPU, and refuses new ones", async () => {
    const held = () => {
      const t = engine.gpu.memory.byTag;
      return { weights: t.weights ?? 0, kv: t.kv ?? 0, lora: t.lora ?? 0, optimizer: t.optimizer ?? 0 };
    };
    const before = held(); // the suite's engine, on the same device, keeps its buffers
    const e = await Engine.load(MODEL_DIR, { name: "closing", kvSlots: 4, maxContext: 512 });
    e.attachLora({ rank: 4 }, 1).ensureOptimizer();
    const loaded = held();
    for (const k of ["weights", "kv", "lora", "optimizer"] as const) expect(loaded[k]).toBeGreaterThan(before[k]);
    const allocated = engine.gpu.memory.allocatedBytes;
    const c = e.openaiClient();
    // More requests than KV slots: some are still waiting when close() runs.
    const reqs = Array.from({ length: 8 }, (_, i) =>
      c.chat.completions.create({ model: "closing", messages, max_tokens: 200, temperature: 1, seed: i }).then(
        () => "done",
        (err: Error) => err.message,
      ),
    );
    await new Promise((r) => setTimeout(r, 50));
    await e.close();
    const outcomes = await Promise.all(reqs);
    expect(outcomes.filter((o) => /engine was closed/.test(o)).length).toBeGreaterThan(0);
    expect(held()).toEqual(before);
    expect(allocated - engine.gpu.memory.allocatedBytes).toBeGreaterThanOrEqual(loaded.weights - before.weights);
    await e.close(); // twice is fine
    await expect(c.chat.completions.create({ model: "closing", messages, max_tokens: 4 })).rejects.toThrow(
      /engine was closed/,
    );
    expect(engine.gpu.errors).toEqual([]);
  }, 120_000);
});
