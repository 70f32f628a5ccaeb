// The official `openai` package against the engine's handler (in-process fetch), on the embedded model.
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

beforeAll(async () => {
  engine = await Engine.load(MODEL_DIR, { name: "tiny", kvSlots: 8, maxContext: 256 });
  client = engine.openaiClient();
});
afterAll(() => engine.close());

describe("chat.completions through the openai SDK", () => {
  it("lists the model", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny"]);
  });

  it("answers, with the sampled token ids and logprobs on the choice", async () => {
    const r = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 12, temperature: 1, seed: 7, logprobs: true, top_logprobs: 3 });
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
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        text += ch.delta.content ?? "";
        finish = ch.finish_reason ?? finish;
      }
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe(a.choices[0].message.content);
    expect(finish).toBe(a.choices[0].finish_reason);
    expect(usage?.completion_tokens).toBe(a.usage?.completion_tokens);
  });

  it("samples n choices that share the prompt, each seeded on its own stream", async () => {
    const r = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, temperature: 1.5, seed: 3, n: 4 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const ids = r.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    expect(new Set(ids).size).toBeGreaterThan(1);
    const greedy = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, temperature: 0, n: 3 });
    const g = greedy.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids));
    expect(new Set(g).size).toBe(1);
    // A single greedy request decodes the same tokens as each of the n greedy samples.
    const one = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 8, temperature: 0 });
    expect(JSON.stringify((one.choices[0] as SampledChoice).token_ids)).toBe(g[0]);
  });

  it("serves concurrent requests in one batch with the same results as one at a time", async () => {
    const reqs = [11, 12, 13, 14, 15].map((seed) => ({ model: "tiny", messages, max_tokens: 6, temperature: 1, seed }));
    const alone: string[] = [];
    for (const q of reqs) alone.push(JSON.stringify(((await client.chat.completions.create(q)).choices[0] as SampledChoice).token_ids));
    const steps0 = engine.scheduler.stats.steps;
    const together = await Promise.all(reqs.map((q) => client.chat.completions.create(q)));
    expect(together.map((r) => JSON.stringify((r.choices[0] as SampledChoice).token_ids))).toEqual(alone);
    // Batched: far fewer engine steps than 5 requests x (prefill + 6 tokens) one after another.
    expect(engine.scheduler.stats.steps - steps0).toBeLessThan(5 * 7);
  });

  it("reuses the KV cache of an earlier turn when the new prompt extends it", async () => {
    const first = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 5, temperature: 0 });
    const next = await client.chat.completions.create({
      model: "tiny",
      messages: [...messages, { role: "assistant", content: first.choices[0].message.content ?? "" }, { role: "user", content: "Again?" }],
      max_tokens: 5,
      temperature: 0,
    });
    expect(next.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(20);
  });

  it.each([
    [{ model: "nope" }, 404, /does not exist/],
    [{ temperature: 5 }, 400, /temperature/],
    [{ max_tokens: 10_000 }, 400, /maximum context length/],
    [{ messages: [{ role: "user", content: "x ".repeat(400) }] }, 400, /maximum context length/],
    [{ n: 0 }, 400, /n: 0/],
  ])("rejects bad input %j with OpenAI's error shape", async (extra, status, msg) => {
    const err = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 4, ...(extra as object) } as never).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(status);
    expect(err.message).toMatch(msg);
  });
});
