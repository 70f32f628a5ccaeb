// Model (ART's art.Model): a prompted model at any OpenAI-compatible endpoint, here a real HTTP server on
// 127.0.0.1, used for rollouts, in gatherTrajectoryGroups, and logged as a baseline run by LocalBackend.
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gatherTrajectoryGroups } from "./gather.ts";
import { LocalBackend } from "./local-backend.ts";
import { Model, TrainableModel } from "./model.ts";
import { Trajectory, type SampledChoice } from "./trajectories.ts";

/** An OpenAI-compatible endpoint that answers each chat with the last user message reversed. */
let server: ReturnType<typeof createServer>;
let baseURL: string;
const seen: { model: string; headers: IncomingHttpHeaders }[] = [];
beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const j = JSON.parse(body) as { model: string; messages: { role: string; content: string }[] };
      seen.push({ model: j.model, headers: req.headers });
      const last = j.messages.filter((m) => m.role === "user").at(-1)!.content;
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          id: "chatcmpl-1",
          object: "chat.completion",
          created: 0,
          model: j.model,
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: [...last].reverse().join(""), refusal: null },
              finish_reason: "stop",
              logprobs: null,
            },
          ],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

async function rollout(model: Model, word: string): Promise<Trajectory> {
  const messages = [{ role: "user" as const, content: word }];
  const r = await model.openaiClient().chat.completions.create({ model: model.getInferenceName(), messages });
  const c = r.choices[0] as SampledChoice;
  return new Trajectory({
    messagesAndChoices: [...messages, c],
    reward: c.message.content === "olleh" ? 1 : 0,
    metrics: { chars: word.length },
  });
}

describe("Model", () => {
  it("rolls out against its endpoint under its inference name, with its key, in gatherTrajectoryGroups", async () => {
    const model = new Model({
      name: "baseline",
      project: "p",
      baseURL,
      apiKey: "sk-test-1234",
      inferenceName: "gpt-x",
    });
    expect(model.trainable).toBe(false);
    expect(model.getInferenceName()).toBe("gpt-x");
    expect(model.openaiClient()).toBe(model.openaiClient());
    const groups = await gatherTrajectoryGroups(
      [["hello", "world"].map((w) => () => rollout(model, w)), [() => rollout(model, "hello")]],
      { progressBar: "off" },
    );
    expect(groups.map((g) => g.rewards())).toEqual([[1, 0], [1]]);
    expect(seen.at(-1)!.model).toBe("gpt-x");
    expect(seen.at(-1)!.headers.authorization).toBe("Bearer sk-test-1234");
    // Its name is the inference name when none is given.
    expect(new Model({ name: "gpt-4o-mini", baseURL }).getInferenceName()).toBe("gpt-4o-mini");
  });

  it("logs a prompted baseline's evaluation as its own run (step 0 unless given), and metrics alone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-model-"));
    const model = new Model({ name: "baseline", project: "p", baseURL, apiKey: "none" });
    const groups = await gatherTrajectoryGroups([["hello", "world"].map((w) => () => rollout(model, w))], {
      progressBar: "off",
    });
    await expect(model.log(groups)).rejects.toThrow('Model "baseline": call register(backend) first');
    const backend = new LocalBackend({ path: dir });
    await model.register(backend);
    await model.log(groups, { metrics: { judged: 2 } });
    await model.log(null, { split: "val", metrics: { accuracy: 0.75 }, step: 3 });
    const run = join(dir, "p/models/baseline");
    expect(JSON.parse(readFileSync(join(run, "model.json"), "utf8"))).toEqual({
      name: "baseline",
      project: "p",
      trainable: false,
    });
    const lines = readFileSync(join(run, "trajectories/val/0000.jsonl"), "utf8").trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]).trajectories.map((t: { reward: number }) => t.reward)).toEqual([1, 0]);
    const hist = readFileSync(join(run, "history.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(hist[0]).toMatchObject({ step: 0, "val/reward": 0.5, "val/chars": 5, "val/judged": 2 });
    expect(hist[1]).toMatchObject({ step: 3, "val/accuracy": 0.75 });
    expect(hist[1]).not.toHaveProperty("val/reward");
    await expect(model.log(groups, { step: -1 })).rejects.toThrow("log: step -1 must be an integer >= 0");
    await expect(model.log(groups, { metrics: { x: NaN } })).rejects.toThrow(
      "log: metrics.x NaN is not a finite number",
    );
    await expect(model.log(groups, { splt: "val" } as never)).rejects.toThrow('log: unknown option "splt"');
    await backend.close();
  });

  it("TrainableModel is a Model; options are checked by name; a Model needs an endpoint", () => {
    const t = new TrainableModel({ name: "agent", project: "p", baseModel: "webart-tiny" });
    expect(t).toBeInstanceOf(Model);
    expect(t.trainable).toBe(true);
    expect(t.baseModel).toBe("webart-tiny");
    expect(t.getInferenceName()).toBe("agent");
    expect(() => new TrainableModel({ name: "a", project: "p", baseModel: "m", baseURL } as never)).toThrow(
      'TrainableModel: unknown option "baseURL"',
    );
    expect(() => new Model({ name: "m", base_url: baseURL } as never)).toThrow('Model: unknown option "base_url"');
    expect(() => new Model({ name: "m" }).openaiClient()).toThrow('Model "m": baseURL is not set');
  });
});
