// `webart serve` over real HTTP on 127.0.0.1 (ephemeral ports) on the embedded model: the official openai
// package, auth, bad input, CORS, load, the bounded wait while a step trains, and SIGTERM during a step.
import { spawn, type ChildProcess } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TrainableModel, Trajectory, TrajectoryGroup, type SampledChoice } from "@webart/engine";
import { RemoteBackend, WeightReader, memorySource, tensorToF32 } from "@webart/engine";
import { authChecker } from "./auth.ts";
import { ServeConfigError, startServer, type RunningServer } from "./server.ts";

const ROOT = join(import.meta.dirname, "../../../../..");
const BASE = join(ROOT, "models/webart-tiny");
const ENGINE = { kvSlots: 32, maxContext: 512 }; // 512: a prompt with a tool definition is ~330 tokens
const messages = [{ role: "user" as const, content: "  1 2 3\nA . . .\nB . x .\nC . . .\nYour move?" }];
const tmp = (p: string) => mkdtempSync(join(tmpdir(), `webart-serve-${p}-`));

let srv: RunningServer;
let client: OpenAI;
const runs = tmp("runs");

beforeAll(async () => {
  srv = await startServer({ model: BASE, port: 0, runs, ...ENGINE });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => srv?.close());

/** Raw request (no URL normalisation, any Host header) for what fetch would not send as is. */
function raw(
  url: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const r = request({ host: u.hostname, port: u.port, path, headers }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    r.on("error", reject);
    r.end();
  });
}

const chatBody = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: "webart-tiny", messages, max_tokens: 4, ...extra });
const post = (url: string, path: string, body: BodyInit, headers: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });

/** The server still answers a normal request correctly. */
async function stillServes(): Promise<void> {
  const r = await client.chat.completions.create({ model: "webart-tiny", messages, max_tokens: 3, seed: 1 });
  expect((r.choices[0] as SampledChoice).token_ids!.length).toBeGreaterThan(0);
}

describe("the official openai package against the server", () => {
  it("lists the model and answers, with token ids, logprobs and usage", async () => {
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(["webart-tiny"]);
    const r = await client.chat.completions.create({
      model: "webart-tiny",
      messages,
      max_tokens: 6,
      temperature: 1,
      seed: 5,
      logprobs: true,
      top_logprobs: 2,
    });
    const c = r.choices[0] as SampledChoice;
    expect(c.token_ids!.length).toBeGreaterThan(0);
    expect(c.token_ids!.length).toBeLessThanOrEqual(6);
    expect(r.usage!.completion_tokens).toBe(c.token_ids!.length);
    expect(c.logprobs!.content!.map((x) => x.logprob)).toEqual(c.token_logprobs);
    expect(c.logprobs!.content!.every((x) => x.top_logprobs.length === 2)).toBe(true);
  });

  it("retrieves a served model by id (the base model and a registered run); an unknown id is a 404", async () => {
    await new TrainableModel({ name: "lookup", project: "serve-test", baseModel: "webart-tiny" }).register(
      new RemoteBackend(srv.url),
    );
    const listed = (await client.models.list()).data;
    for (const id of ["webart-tiny", "lookup"]) {
      const m = await client.models.retrieve(id);
      expect(m).toMatchObject({ id, object: "model", owned_by: "webart" });
      expect(m).toEqual(listed.find((x) => x.id === id));
    }
    const err = await client.models.retrieve("nope").catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect([err.code, err.type, err.param]).toEqual(["model_not_found", "not_found_error", "model"]);
    expect(err.message).toMatch(/`nope` does not exist/);
    expect((await fetch(`${srv.url}/v1/models/webart-tiny/x`)).status).toBe(404);
  });

  it("streams the same tokens as the non-streaming answer (same seed)", async () => {
    const req = { model: "webart-tiny", messages, max_tokens: 8, temperature: 1, seed: 77 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({
      ...req,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const ch of stream) {
      chunks++;
      text += ch.choices[0]?.delta.content ?? "";
      usage = ch.usage ?? usage;
    }
    expect(chunks).toBeGreaterThan(2);
    expect(text).toBe(whole.choices[0].message.content);
    expect(usage?.completion_tokens).toBe(whole.usage?.completion_tokens);
  });

  it("samples n > 1 choices", async () => {
    const r = await client.chat.completions.create({
      model: "webart-tiny",
      messages,
      max_tokens: 6,
      temperature: 1.5,
      seed: 3,
      n: 3,
    });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(r.choices.map((c) => JSON.stringify((c as SampledChoice).token_ids))).size).toBeGreaterThan(1);
  });

  it("answers json_schema output that parses and fits the schema", async () => {
    const cells = ["A1", "B2", "C3"];
    const schema = {
      type: "object",
      properties: { move: { type: "string", enum: cells } },
      required: ["move"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model: "webart-tiny",
      messages,
      max_tokens: 40,
      temperature: 1,
      seed: 9,
      n: 2,
      response_format: { type: "json_schema", json_schema: { name: "move", schema, strict: true } },
    });
    for (const c of r.choices) {
      const j = JSON.parse(c.message.content!);
      expect(Object.keys(j)).toEqual(["move"]);
      expect(cells).toContain(j.move);
    }
  });

  it("returns a forced tool call (tool_choice required, and named while streaming) with valid arguments", async () => {
    const cells = ["A1", "B2", "C3"];
    const parameters = { type: "object", properties: { cell: { enum: cells } }, required: ["cell"] };
    const tools = [{ type: "function" as const, function: { name: "mark", parameters } }];
    // No max_tokens: the rest of the context, as an untrained model may pad the JSON with whitespace.
    const req = { model: "webart-tiny", messages, tools, temperature: 1, seed: 4 };
    const named = { type: "function" as const, function: { name: "mark" } };
    // Both at once (they batch): one plain, one streamed.
    const calls: { name?: string; arguments?: string }[] = [];
    let finish: string | null = null;
    const [r] = await Promise.all([
      client.chat.completions.create({ ...req, tool_choice: "required" }),
      (async () => {
        const stream = await client.chat.completions.create({ ...req, tool_choice: named, stream: true });
        for await (const ch of stream) {
          for (const d of ch.choices[0]?.delta.tool_calls ?? []) calls.push(d.function ?? {});
          finish = ch.choices[0]?.finish_reason ?? finish;
        }
      })(),
    ]);
    expect(r.choices[0].finish_reason).toBe("tool_calls");
    const tc = r.choices[0].message.tool_calls!;
    expect(tc).toHaveLength(1);
    expect(tc[0].type === "function" && tc[0].function.name).toBe("mark");
    expect(cells).toContain(tc[0].type === "function" && JSON.parse(tc[0].function.arguments).cell);
    expect(finish).toBe("tool_calls");
    // As OpenAI streams a call: the name in the first delta, then the arguments in pieces.
    expect(calls[0].name).toBe("mark");
    expect(calls.slice(1).every((f) => f.name === undefined)).toBe(true);
    expect(cells).toContain(JSON.parse(calls.map((f) => f.arguments ?? "").join("")).cell);
  });
});

describe("bad input", () => {
  const errorOf = async (r: Response) => ({
    status: r.status,
    error: ((await r.json()) as { error: { message: string; type: string; param: string | null; code: string | null } })
      .error,
  });

  it("malformed JSON and wrong types are 400s in OpenAI's shape, naming the field", async () => {
    for (const [path, body, param] of [
      ["/v1/chat/completions", "{not json", null],
      ["/v1/webart/models", "{not json", null],
      ["/v1/chat/completions", chatBody({ messages: "hi" }), "messages"],
      ["/v1/chat/completions", chatBody({ n: "2" }), "n"],
      ["/v1/webart/models", JSON.stringify({ name: 5, project: "p", baseModel: "webart-tiny" }), "name"],
      ["/v1/webart/models", JSON.stringify({ name: "m", project: "p", baseModel: "other/model" }), "baseModel"],
      [
        "/v1/webart/models",
        JSON.stringify({ name: "m", project: "p", baseModel: "webart-tiny", lora: { rank: 0 } }),
        "lora",
      ],
    ] as const) {
      const { status, error } = await errorOf(await post(srv.url, path, body));
      expect([path, status]).toEqual([path, 400]);
      expect(error.type).toBe("invalid_request_error");
      expect(error.message.length).toBeGreaterThan(5);
      expect(error.param).toBe(param);
    }
    await stillServes();
  });

  it("a body over the limit is a 413 (declared or streamed), and the connection survives", async () => {
    const huge = chatBody({ messages: [{ role: "user", content: "x".repeat(5 * 2 ** 20) }] });
    const a = await errorOf(await post(srv.url, "/v1/chat/completions", huge));
    expect(a.status).toBe(413);
    expect(a.error.code).toBe("request_too_large");
    // No Content-Length: the limit is enforced while reading.
    const chunk = new TextEncoder().encode("x".repeat(2 ** 20));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({ pull: (c) => (sent++ < 6 ? c.enqueue(chunk) : c.close()) });
    const b = await errorOf(
      await fetch(`${srv.url}/v1/chat/completions`, { method: "POST", body: stream, duplex: "half" } as RequestInit),
    );
    expect(b.status).toBe(413);
    await stillServes();
  });

  it("an unknown model is a 404 with OpenAI's code", async () => {
    const err = await client.chat.completions.create({ model: "nope", messages, max_tokens: 2 }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
    const r = await errorOf(await fetch(`${srv.url}/v1/webart/models/p/unknown/step`));
    expect([r.status, r.error.code]).toEqual([404, "model_not_registered"]);
    await stillServes();
  });

  it("names that could reach the file system are refused before any lookup", async () => {
    for (const path of [
      "/v1/webart/models/..%2F..%2Fetc/passwd/step",
      "/v1/webart/models/p/..%5Cx/checkpoints",
      "/v1/webart/models/p/m/checkpoints/1/..%2F..%2Fmodel.json",
      "/v1/webart/models/.hidden/m/step",
    ]) {
      const r = await errorOf(await fetch(`${srv.url}${path}`));
      expect([path, r.status]).toEqual([path, 400]);
      expect(["invalid_path", "invalid_name"]).toContain(r.error.code);
    }
    // fetch would normalise these away; sent as is, they are refused.
    for (const path of ["/v1/webart/models/../../../etc/step", "/v1/webart/models/p/%2e%2e/step"]) {
      const dots = await raw(srv.url, path);
      expect([path, dots.status]).toEqual([path, 400]);
      expect(JSON.parse(dots.body).error.code).toBe("invalid_path");
    }
    const reg = await post(
      srv.url,
      "/v1/webart/models",
      JSON.stringify({ name: "../x", project: "p", baseModel: "webart-tiny" }),
    );
    expect((await errorOf(reg)).error.param).toBe("name");
    await stillServes();
  });

  it("unknown routes and wrong methods are 404 and 405", async () => {
    expect((await fetch(`${srv.url}/v1/completions`, { method: "POST" })).status).toBe(404);
    expect((await fetch(`${srv.url}/v1/chat/completions`)).status).toBe(405);
    expect((await fetch(`${srv.url}/v1/webart/status`, { method: "DELETE" })).status).toBe(405);
  });
});

describe("security", () => {
  it("refuses to listen beyond loopback without an API key (in-process and from the CLI)", async () => {
    await expect(startServer({ model: BASE, host: "0.0.0.0", port: 0 })).rejects.toBeInstanceOf(ServeConfigError);
    const cli = (args: string[]) =>
      new Promise<{ code: number | null; err: string }>((resolve) => {
        const p = spawn(process.execPath, ["packages/webart/bin/webart.js", "serve", ...args], {
          cwd: ROOT,
          env: { ...process.env, WEBART_UNSET_KEY: "" },
        });
        let err = "";
        p.stderr.on("data", (c) => (err += c));
        p.on("exit", (code) => resolve({ code, err }));
      });
    const [host, key] = await Promise.all([
      cli(["--host", "0.0.0.0", "--port", "0"]),
      cli(["--api-key-env", "WEBART_UNSET_KEY", "--port", "0"]),
    ]);
    expect(host.code).toBe(2);
    expect(host.err).toMatch(/--host 0\.0\.0\.0 .*--api-key-env/);
    expect(key.code).toBe(2);
    expect(key.err).toMatch(/WEBART_UNSET_KEY is not set/);
  });

  it("checks the bearer key on every route; CORS only for the named origin", async () => {
    const origin = "http://localhost:5173";
    const s = await startServer({
      model: BASE,
      port: 0,
      runs: tmp("runs-auth"),
      kvSlots: 4,
      maxContext: 128,
      apiKey: "s3cret-key",
      cors: origin,
    });
    try {
      const get = (path: string, headers: Record<string, string> = {}) => fetch(`${s.url}${path}`, { headers });
      for (const path of ["/v1/models", "/v1/webart/status", "/v1/webart/models/p/m/step"]) {
        for (const auth of [undefined, "Bearer wrong", "Bearer s3cret-key-but-longer", "Basic s3cret-key"]) {
          const r = await get(path, auth ? { authorization: auth } : {});
          expect([path, auth, r.status]).toEqual([path, auth, 401]);
          expect(((await r.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
        }
      }
      expect((await get("/v1/models", { authorization: "Bearer s3cret-key" })).status).toBe(200);
      expect((await post(s.url, "/v1/chat/completions", chatBody(), {})).status).toBe(401);
      const wrong = await new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "nope", maxRetries: 0 }).models
        .list()
        .catch((e) => e);
      expect(wrong).toBeInstanceOf(OpenAI.AuthenticationError);
      const ok = await new OpenAI({
        baseURL: `${s.url}/v1`,
        apiKey: "s3cret-key",
        maxRetries: 0,
      }).chat.completions.create({ model: "webart-tiny", messages, max_tokens: 2 });
      expect(ok.choices).toHaveLength(1);
      // CORS: the named origin gets the header and a preflight; another origin is refused.
      const fromApp = await get("/v1/models", { authorization: "Bearer s3cret-key", origin });
      expect(fromApp.headers.get("access-control-allow-origin")).toBe(origin);
      const pre = await fetch(`${s.url}/v1/chat/completions`, {
        method: "OPTIONS",
        headers: {
          origin,
          "access-control-request-method": "POST",
          "access-control-request-headers": "authorization, content-type",
        },
      });
      expect(pre.status).toBe(204);
      expect(pre.headers.get("access-control-allow-headers")).toMatch(/authorization/);
      const evil = await get("/v1/models", { authorization: "Bearer s3cret-key", origin: "http://evil.example" });
      expect(evil.status).toBe(403);
      expect(evil.headers.get("access-control-allow-origin")).toBeNull();
    } finally {
      await s.close();
    }
    // Without --cors no origin is allowed; without a key, a non-loopback Host (DNS rebinding) is refused.
    const noCors = await fetch(`${srv.url}/v1/models`, { headers: { origin: "http://localhost:5173" } });
    expect(noCors.status).toBe(403);
    expect(noCors.headers.get("access-control-allow-origin")).toBeNull();
    expect((await raw(srv.url, "/v1/models", { host: "attacker.example:80" })).status).toBe(403);
    expect((await raw(srv.url, "/v1/models", { host: `localhost:${srv.port}` })).status).toBe(200);
    // Without a key only loopback clients are served.
    const check = authChecker(undefined);
    expect(() => check(undefined, "127.0.0.1")).not.toThrow();
    expect(() => check(undefined, "::ffff:127.0.0.1")).not.toThrow();
    expect(() => check(undefined, "192.168.1.20")).toThrow(/loopback clients only/);
  });
});

describe("load", () => {
  it("32 concurrent requests all complete, batched: fewer engine steps and less time than one at a time", async () => {
    const reqs = Array.from({ length: 32 }, (_, i) => ({
      model: "webart-tiny",
      messages: [{ role: "user" as const, content: `Game ${i}. Your move?` }],
      max_tokens: 3,
      temperature: 1,
      seed: 100 + i,
    }));
    const ids = (r: OpenAI.ChatCompletion) => JSON.stringify((r.choices[0] as SampledChoice).token_ids);
    const stats = srv.engine.scheduler.stats;
    let s0 = stats.steps;
    let t0 = performance.now();
    const one: OpenAI.ChatCompletion[] = [];
    for (const q of reqs) one.push(await client.chat.completions.create(q));
    const seqMs = performance.now() - t0;
    const seqSteps = stats.steps - s0;
    s0 = stats.steps;
    t0 = performance.now();
    const all = await Promise.all(reqs.map((q) => client.chat.completions.create(q)));
    const parMs = performance.now() - t0;
    const parSteps = stats.steps - s0;
    for (const r of all) {
      expect(r.object).toBe("chat.completion");
      expect(["stop", "length"]).toContain(r.choices[0].finish_reason);
      expect((r.choices[0] as SampledChoice).token_ids!.length).toBeGreaterThan(0);
    }
    // Same seeds, same answers, whether batched or not.
    expect(all.map(ids)).toEqual(one.map(ids));
    console.log(
      `load: 32 requests one at a time ${seqMs.toFixed(0)} ms (${seqSteps} engine steps), concurrent ${parMs.toFixed(0)} ms (${parSteps} steps): ${(seqMs / parMs).toFixed(2)}x throughput`,
    );
    expect(parSteps * 4).toBeLessThan(seqSteps);
    expect(parMs).toBeLessThan(seqMs);
  });
});

/** Rollouts through the server for a quick step: 2 groups of 2, rewards 1 and 0 in each (so both train). */
async function groups(model: TrainableModel, seed: number): Promise<TrajectoryGroup[]> {
  const c = model.openaiClient();
  const one = async (i: number) => {
    const r = await c.chat.completions.create({
      model: model.getInferenceName(),
      messages,
      max_tokens: 8,
      temperature: 1,
      seed: seed + i,
    });
    return new Trajectory({ messagesAndChoices: [...messages, r.choices[0] as SampledChoice], reward: i % 2 });
  };
  return Promise.all([0, 2].map(async (g) => new TrajectoryGroup(await Promise.all([one(g), one(g + 1)]))));
}

const status = async (url: string) => (await (await fetch(`${url}/v1/webart/status`)).json()) as { training: string[] };
async function untilTraining(url: string, name: string, step: Promise<unknown>): Promise<void> {
  let done = false;
  void step.finally(() => (done = true));
  while (!(await status(url)).training.includes(name)) {
    if (done) throw new Error("the step ended before it was seen running");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("inference while a step trains, and --adapter", () => {
  it("waits for the step and answers; past the bound, 503 with Retry-After; a trained adapter serves the same", async () => {
    const model = new TrainableModel({ name: "waiter", project: "serve-test", baseModel: "webart-tiny" });
    await model.register(new RemoteBackend(srv.url));
    const step = model.train(await groups(model, 1), { learningRate: 1e-2 });
    await untilTraining(srv.url, "waiter", step);
    const during = await model.openaiClient().chat.completions.create({ model: "waiter", messages, max_tokens: 2 });
    expect(during.choices[0].message.role).toBe("assistant");
    expect((await step).step).toBe(1);

    // A second server: the step-1 checkpoint as --adapter, and no wait for training steps.
    const adapter = join(runs, "serve-test/models/waiter/checkpoints/0001");
    const s = await startServer({
      model: BASE,
      adapter,
      port: 0,
      runs: tmp("runs-503"),
      kvSlots: 4,
      maxContext: 256,
      maxWaitMs: 0,
    });
    try {
      const greedy = async (url: string, model: string) => {
        const r = await post(url, "/v1/chat/completions", chatBody({ model, temperature: 0, max_tokens: 6 }));
        return ((await r.json()) as { choices: SampledChoice[] }).choices[0];
      };
      const [withAdapter, trained, base] = [
        await greedy(s.url, "webart-tiny"),
        await greedy(srv.url, "waiter"),
        await greedy(srv.url, "webart-tiny"),
      ];
      expect(withAdapter.token_ids).toEqual(trained.token_ids);
      const diff = (a: SampledChoice, b: SampledChoice) =>
        Math.max(...a.token_logprobs!.map((x, i) => Math.abs(x - b.token_logprobs![i])));
      expect(diff(withAdapter, trained)).toBeLessThan(1e-4);
      // The step did change the adapter (LoRA B starts at zero), so --adapter serves trained weights.
      const ad = await WeightReader.fromSource(
        memorySource(new Uint8Array(readFileSync(join(adapter, "adapter_model.safetensors"))), "adapter"),
      );
      const bNames = [...ad.tensorsInfo.keys()].filter((n) => n.includes("lora_B"));
      let moved = 0;
      for (const n of bNames) moved = Math.max(moved, ...tensorToF32(await ad.read(n)).map(Math.abs));
      expect(moved).toBeGreaterThan(0);
      void base;

      // The same adapter written as rsLoRA (PEFT scales by alpha / sqrt(r)) serves the same; DoRA is refused.
      const cfg = JSON.parse(readFileSync(join(adapter, "adapter_config.json"), "utf8")) as {
        r: number;
        lora_alpha: number;
      };
      const rs = tmp("rslora");
      cpSync(adapter, rs, { recursive: true });
      writeFileSync(
        join(rs, "adapter_config.json"),
        JSON.stringify({ ...cfg, use_rslora: true, lora_alpha: cfg.lora_alpha / Math.sqrt(cfg.r) }),
      );
      const sr = await startServer({
        model: BASE,
        adapter: rs,
        port: 0,
        runs: tmp("runs-rslora"),
        kvSlots: 2,
        maxContext: 256,
      });
      try {
        const viaRs = await greedy(sr.url, "webart-tiny");
        expect(viaRs.token_ids).toEqual(withAdapter.token_ids);
        expect(diff(viaRs, withAdapter)).toBeLessThan(1e-4);
      } finally {
        await sr.close();
      }
      writeFileSync(join(rs, "adapter_config.json"), JSON.stringify({ ...cfg, use_dora: true }));
      await expect(
        startServer({ model: BASE, adapter: rs, port: 0, runs: tmp("runs-dora"), kvSlots: 2, maxContext: 256 }),
      ).rejects.toThrow(/adapter_config\.json: use_dora true: DoRA adapters are not supported/);

      const m2 = new TrainableModel({ name: "busy", project: "serve-test", baseModel: "webart-tiny" });
      await m2.register(new RemoteBackend(s.url, { maxRetries: 0 }));
      const step2 = m2.train(await groups(m2, 5), { learningRate: 1e-3 });
      await untilTraining(s.url, "busy", step2);
      const r = await post(s.url, "/v1/chat/completions", chatBody({ model: "busy" }));
      expect(r.status).toBe(503);
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("model_training");
      expect((await step2).step).toBe(1);
      expect((await post(s.url, "/v1/chat/completions", chatBody({ model: "busy" }))).status).toBe(200);
    } finally {
      await s.close();
    }
  });
});

describe("one copy of the base model", () => {
  it("runs registered on the server use the served model's weights: each adds only its RoPE table to the weights", async () => {
    const stats = srv.engine.gpu.pool.stats;
    const weights0 = stats.byTag.weights;
    const base = srv.engine.model.weights;
    const baseBytes = base.buffers.reduce((s, b) => s + b.size, 0);
    const models = ["share-1", "share-2"].map(
      (name) => new TrainableModel({ name, project: "serve-test", baseModel: "webart-tiny" }),
    );
    for (const m of models) await m.register(new RemoteBackend(srv.url));
    // The server's own engine for each run (the spec as the server registered it: same project and name).
    for (const m of models) expect(srv.backend.engine({ ...m.spec, baseModel: BASE }).model.weights).toBe(base);
    expect(stats.byTag.weights - weights0).toBe(2 * srv.engine.model.invFreq.size);
    expect(stats.byTag.weights).toBeLessThan(2 * baseBytes);
    for (const m of models) {
      const r = await client.chat.completions.create({ model: m.name, messages, max_tokens: 2 });
      expect((r.choices[0] as SampledChoice).token_ids!.length).toBeGreaterThan(0);
    }
  });
});

describe("--quantize q4", () => {
  it("serves the base model from q4 weights; runs registered there share them and record it", async () => {
    const qruns = tmp("q4runs");
    const q = await startServer({ model: BASE, port: 0, runs: qruns, quantize: "q4", ...ENGINE });
    try {
      expect(q.engine.model.quantized).toBe(true);
      const c = new OpenAI({ baseURL: `${q.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const r = await c.chat.completions.create({ model: "webart-tiny", messages, max_tokens: 3, seed: 1 });
      expect((r.choices[0] as SampledChoice).token_ids!.length).toBeGreaterThan(0);
      const m = new TrainableModel({ name: "q4-run", project: "serve-test", baseModel: "webart-tiny" });
      await m.register(new RemoteBackend(q.url));
      // The run shares the served q4 weights, and its folder says what it trains on.
      expect(q.backend.engine({ ...m.spec, baseModel: BASE }).model.weights).toBe(q.engine.model.weights);
      const saved = JSON.parse(readFileSync(join(qruns, "serve-test/models/q4-run/model.json"), "utf8"));
      expect(saved.quantize).toBe("q4");
    } finally {
      await q.close();
    }
  });
});

describe("shutdown", () => {
  it("SIGTERM during a step: the step finishes and checkpoints, the client gets its answer, exit 0", async () => {
    const runs = tmp("runs-sigterm");
    const p: ChildProcess = spawn(
      process.execPath,
      [
        "packages/webart/bin/webart.js",
        "serve",
        "--port",
        "0",
        "--runs",
        runs,
        "--kv-slots",
        "8",
        "--max-context",
        "256",
      ],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
    );
    const exited = new Promise<number | null>((r) => p.on("exit", (code) => r(code)));
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      p.stdout!.on("data", (c) => {
        out += c;
        const m = /(http:\/\/\S+)\/v1 serving/.exec(out);
        if (m) resolve(m[1]);
      });
      p.on("exit", (code) => reject(new Error(`server exited (${code}) before listening: ${out}`)));
    });
    const model = new TrainableModel({ name: "graceful", project: "serve-test", baseModel: "webart-tiny" });
    await model.register(new RemoteBackend(url, { maxRetries: 0 }));
    const step = model.train(await groups(model, 9), { learningRate: 1e-3 });
    await untilTraining(url, "graceful", step);
    p.kill("SIGTERM");
    expect((await step).step).toBe(1);
    expect(await exited).toBe(0);
    const dir = join(runs, "serve-test/models/graceful");
    expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("1");
    expect(existsSync(join(dir, "checkpoints/0001/adapter_model.safetensors"))).toBe(true);
    await expect(fetch(`${url}/v1/models`)).rejects.toThrow();
  });
});
