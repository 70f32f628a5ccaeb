// ruler() against a scripted judge over real HTTP on 127.0.0.1: retries counted per failure kind,
// errors after maxRetries, id matching with shuffled replies, timeouts, Retry-After, key redaction.
import { afterEach, describe, expect, it } from "vitest";
import OpenAI from "openai";
import { ArtModel, clientForHandler, type Message, type SampledChoice } from "@webart/engine";
import { ruler, RulerError, type RulerOptions } from "./ruler.ts";
import { DEFAULT_RUBRIC, buildJudgePrompt } from "./prompt.ts";
import {
  requestedIds,
  script,
  startJudge,
  type JudgeRequest,
  type ScriptedJudge,
  type Step,
} from "./scripted-judge.ts";

const sys: Message = { role: "system", content: "Reach 2048 in as few moves as you can." };
const user: Message = { role: "user", content: "Board: [[2,2],[0,0]]" };
const say = (content: string): Message => ({ role: "assistant", content });
const lists: Message[][] = [
  [sys, user, say("left")],
  [sys, user, say("up"), { role: "user", content: "No change." }],
  [sys, user, say("right")],
];

/** The scores the judge means to give, by id; replies list them in another order. */
const intended: Record<string, number> = { "1": 0.2, "2": 0.9, "3": 0.55 };
const entry = (id: string, score: unknown = intended[id]) => ({ trajectory_id: id, explanation: `why ${id}`, score });
const reply = (entries: unknown[]): Step => ({ content: JSON.stringify({ scores: entries }) });
/** A valid answer for whatever ids the request asked for, in shuffled (reversed, rotated) order. */
const valid = (req: JudgeRequest): Step => {
  const ids = requestedIds(req);
  const order = [...ids.slice(1), ids[0]].reverse();
  return reply(order.map((id) => entry(id, intended[id] ?? 0.5)));
};

let judge: ScriptedJudge | undefined;
afterEach(async () => {
  await judge?.close();
  judge = undefined;
});

async function withScript(steps: (Step | ((r: JudgeRequest) => Step))[]): Promise<ScriptedJudge> {
  judge = await startJudge((req, i) => {
    const s = steps[i];
    return typeof s === "function" ? s(req) : (s ?? script([])(req, i));
  });
  return judge;
}

const opts = (j: ScriptedJudge, more: Partial<RulerOptions> = {}): RulerOptions => ({
  baseURL: j.baseURL,
  apiKey: "sk-test-0123456789abcdef",
  model: "judge-1",
  backoffMs: 1,
  timeoutMs: 2000,
  ...more,
});

const expectIntended = (scores: { trajectoryId: string; score: number; explanation: string }[]) => {
  expect(scores.map((s) => s.trajectoryId)).toEqual(["1", "2", "3"]);
  for (const s of scores) {
    expect(s.score).toBe(intended[s.trajectoryId]);
    expect(s.explanation).toBe(`why ${s.trajectoryId}`);
  }
};

// Each failure the judge can produce, and the reason ruler must give when it persists.
const failures: { name: string; step: Step; reason: RegExp; timeoutMs?: number }[] = [
  { name: "malformed JSON", step: { content: '{"scores": [{"trajectory_id": "1",' }, reason: /not JSON/ },
  {
    name: "wrong id",
    step: reply([entry("1"), entry("2"), entry("9", 0.5)]),
    reason: /"9" is not one of "1", "2", "3"/,
  },
  { name: "missing id", step: reply([entry("1"), entry("3")]), reason: /no score for trajectory "2"/ },
  { name: "duplicate id", step: reply([entry("1"), entry("2"), entry("2")]), reason: /"2" appears more than once/ },
  { name: "too few scores", step: reply([entry("2")]), reason: /expected 3 scores, got 1/ },
  {
    name: "too many scores",
    step: reply([entry("1"), entry("2"), entry("3"), entry("3")]),
    reason: /expected 3 scores, got 4/,
  },
  { name: "score 1.7", step: reply([entry("1", 1.7), entry("2"), entry("3")]), reason: /"1" is 1.7, outside \[0, 1\]/ },
  {
    name: "score NaN",
    step: { content: '{"scores":[{"trajectory_id":"1","explanation":"","score":NaN}]}' },
    reason: /not JSON/,
  },
  {
    name: "score null",
    step: reply([entry("1"), entry("2", null), entry("3")]),
    reason: /"2" is null, expected a finite number/,
  },
  {
    name: 'score "0.5"',
    step: reply([entry("1"), entry("2"), entry("3", "0.5")]),
    reason: /"3" is "0.5", expected a finite number/,
  },
  { name: "empty reply", step: { content: null, refusal: "I won't." }, reason: /the judge refused: I won't/ },
  {
    name: "429 with Retry-After",
    step: { status: 429, headers: { "retry-after": "0" }, body: { error: { message: "slow down" } } },
    reason: /HTTP 429.*slow down/,
  },
  {
    name: "reply cut off at max_tokens",
    step: { content: '{"scores": [{"trajectory_id": "1", "expl', finishReason: "length" },
    reason: /not JSON.*cut off at max_tokens/,
  },
  { name: "500", step: { status: 500, body: { error: { message: "boom" } } }, reason: /HTTP 500.*boom/ },
  { name: "503", step: { status: 503 }, reason: /HTTP 503/ },
  { name: "hang past timeoutMs", step: { hang: true }, reason: /timed out.*timeoutMs 250/, timeoutMs: 250 },
  { name: "body stalled past timeoutMs", step: { stallBody: true }, reason: /timed out/, timeoutMs: 250 },
];

describe("ruler retries", () => {
  for (const f of failures) {
    it(`${f.name}: retried, then the valid answer is used; after maxRetries the error says why`, async () => {
      const ok = await withScript([f.step, valid]);
      expectIntended(await ruler(lists, opts(ok, { timeoutMs: f.timeoutMs ?? 2000 })));
      expect(ok.requests).toHaveLength(2);
      await ok.close();

      const bad = await withScript([f.step, f.step, f.step, valid]);
      const err = await ruler(lists, opts(bad, { maxRetries: 2, timeoutMs: f.timeoutMs ?? 2000 })).catch((e) => e);
      expect(err).toBeInstanceOf(RulerError);
      expect(bad.requests).toHaveLength(3);
      expect(err.attempts).toHaveLength(3);
      expect(err.message).toMatch(/gave no usable answer in 3 attempts \(maxRetries 2\)/);
      expect(err.message).toMatch(f.reason);
      if ("content" in f.step && f.step.content) expect(err.message).toContain(`The judge returned: ${f.step.content}`);
    });
  }

  it("maxRetries 0 makes one request; 1 makes two", async () => {
    const j = await withScript([{ status: 500 }, { status: 500 }, { status: 500 }, valid]);
    await expect(ruler(lists, opts(j, { maxRetries: 0 }))).rejects.toThrow(/in 1 attempts/);
    expect(j.requests).toHaveLength(1);
    await expect(ruler(lists, opts(j, { maxRetries: 1 }))).rejects.toThrow(/in 2 attempts/);
    expect(j.requests).toHaveLength(3);
  });

  it("truncates a long reply in the error and keeps it whole on the attempt", async () => {
    const long = "x".repeat(2000);
    const j = await withScript([{ content: long }]);
    const err = await ruler(lists, opts(j, { maxRetries: 0 })).catch((e) => e);
    expect(err.message).toContain(`${"x".repeat(400)}… (2000 chars in all)`);
    expect(err.message).not.toContain("x".repeat(401));
    expect(err.attempts[0].reply).toBe(long);
  });

  it("retries a refused connection and says so", async () => {
    const closed = await startJudge(script([]));
    await closed.close(); // nothing listens on this port any more
    const err = await ruler(lists, opts(closed, { maxRetries: 1 })).catch((e) => e);
    expect(err).toBeInstanceOf(RulerError);
    expect(err.attempts).toHaveLength(2);
    expect(err.message).toMatch(
      /gave no usable answer in 2 attempts.*connection failed: Connection error\. \(fetch failed: ECONNREFUSED\)/,
    );
  });

  it("does not retry a 400 and names it", async () => {
    const j = await withScript([{ status: 400, body: { error: { message: "unknown model judge-1" } } }, valid]);
    const err = await ruler(lists, opts(j)).catch((e) => e);
    expect(j.requests).toHaveLength(1);
    expect(err.message).toMatch(/failed on attempt 1 \(not retried\).*HTTP 400.*unknown model judge-1/);
  });

  it("waits out a small Retry-After, and stops at one longer than maxRetryAfterMs", async () => {
    const j = await withScript([{ status: 429, headers: { "retry-after": "1" } }, valid]);
    const t0 = Date.now();
    expectIntended(await ruler(lists, opts(j, { backoffMs: 1 })));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(950);
    await j.close();

    const ms = await withScript([{ status: 429, headers: { "retry-after-ms": "300" } }, valid]);
    const t1 = Date.now();
    expectIntended(await ruler(lists, opts(ms)));
    expect(Date.now() - t1).toBeGreaterThanOrEqual(280);
    await ms.close();

    const long = await withScript([{ status: 429, headers: { "retry-after": "120" } }, valid]);
    const err = await ruler(lists, opts(long)).catch((e) => e);
    expect(long.requests).toHaveLength(1);
    expect(err.message).toMatch(/Retry-After 120 s exceeds maxRetryAfterMs 30000, so not retried/);
  });

  it("backs off between retries when no Retry-After is given", async () => {
    const j = await withScript([{ status: 500 }, { status: 500 }, valid]);
    const t0 = Date.now();
    expectIntended(await ruler(lists, opts(j, { backoffMs: 150 })));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150 + 300 - 20);
  });
});

describe("ruler requests and answers", () => {
  it("sends the prompt, strict json_schema and extra params; scores land on the right trajectories", async () => {
    const j = await withScript([valid]);
    const tools = [{ type: "function" as const, function: { name: "swipe", parameters: { type: "object" } } }];
    const scores = await ruler(lists, opts(j, { tools, requestParams: { temperature: 0.3 } }));
    expectIntended(scores);
    const body = j.requests[0].body;
    expect(j.requests[0].url).toBe("/v1/chat/completions");
    expect(body.model).toBe("judge-1");
    expect(body.temperature).toBe(0.3);
    expect(body.response_format?.type).toBe("json_schema");
    expect(body.response_format?.json_schema?.strict).toBe(true);
    expect(body.response_format?.json_schema?.name).toBe("ruler_scores");
    expect(requestedIds(j.requests[0])).toEqual(["1", "2", "3"]);
    expect(body.messages).toEqual(buildJudgePrompt(lists, DEFAULT_RUBRIC, tools).messages);
    expect(body.messages[1].content).toContain('"name":"swipe"');
  });

  it("accepts an answer in a ```json fence after leading text", async () => {
    const j = await withScript([
      (r) => ({ content: "Sure, here it is:\n```json\n" + (valid(r) as { content: string }).content + "\n```" }),
    ]);
    expectIntended(await ruler(lists, opts(j)));
    expect(j.requests).toHaveLength(1);
  });

  it("clamps out-of-range scores with clampScores, and refuses a string score even then", async () => {
    const j = await withScript([reply([entry("1", 1.7), entry("2", -0.5), entry("3")])]);
    const s = await ruler(lists, opts(j, { clampScores: true }));
    expect(s.map((x) => x.score)).toEqual([1, 0, intended["3"]]);
    await j.close();
    const k = await withScript([reply([entry("1", "0.5"), entry("2"), entry("3")])]);
    await expect(ruler(lists, opts(k, { clampScores: true, maxRetries: 0 }))).rejects.toThrow(
      /"0.5", expected a finite/,
    );
  });

  it("judges one trajectory when all are identical and copies its score", async () => {
    const j = await withScript([valid]);
    const warnings: string[] = [];
    const same = [lists[1], [...lists[1]], lists[1].map((m) => ({ ...m }))];
    const s = await ruler(same, opts(j, { debug: (l) => warnings.push(l) }));
    expect(requestedIds(j.requests[0])).toEqual(["1"]);
    const prompt = j.requests[0].body.messages[1].content;
    expect(prompt.match(/<trajectory id=/g)).toHaveLength(1);
    expect(prompt).not.toContain("<shared_context>");
    expect(prompt).toContain(JSON.stringify(lists[1]));
    expect(s.map((x) => x.trajectoryId)).toEqual(["1", "2", "3"]);
    expect(s.map((x) => x.score)).toEqual([intended["1"], intended["1"], intended["1"]]);
    expect(warnings.some((w) => /all 3 trajectories are identical/.test(w))).toBe(true);
  });

  it("treats a sampled Choice like its assistant message when finding the shared prefix", async () => {
    const j = await withScript([valid]);
    const choice: SampledChoice = {
      index: 0,
      finish_reason: "stop",
      logprobs: null,
      message: { role: "assistant", content: "left", refusal: null },
      token_ids: [1, 2],
      token_logprobs: [-0.1, -0.2],
    };
    await ruler(
      [
        [sys, user, choice, say("a")],
        [sys, user, say("left"), say("b")],
      ],
      opts(j),
    );
    expect(j.requests[0].body.messages[1].content).toContain(
      `<shared_context>\n${JSON.stringify([sys, user, say("left")])}`,
    );
  });

  it("makes no request for no trajectories, and refuses bad options by name", async () => {
    const j = await withScript([]);
    expect(await ruler([], opts(j))).toEqual([]);
    expect(j.requests).toHaveLength(0);
    const client = new OpenAI({ baseURL: j.baseURL, apiKey: "x" });
    await expect(ruler(lists, { client, baseURL: j.baseURL, model: "m" })).rejects.toThrow(/either client, or baseURL/);
    await expect(ruler(lists, opts(j, { requestParams: { model: "x" } }))).rejects.toThrow(
      /requestParams: model is set by ruler/,
    );
    await expect(ruler(lists, opts(j, { maxRetries: -1 }))).rejects.toThrow(
      /maxRetries: -1 is not a non-negative integer/,
    );
    await expect(ruler(lists, opts(j, { timeoutMs: 0 }))).rejects.toThrow(/timeoutMs/);
    await expect(ruler(lists, { ...opts(j), model: "" })).rejects.toThrow(/model/);
  });
});

describe("ruler clients", () => {
  it("takes a Model as the judge: its endpoint, key and inference name; not beside another endpoint", async () => {
    const j = await withScript([valid]);
    const judgeModel = new ArtModel({
      name: "judge",
      baseURL: j.baseURL,
      apiKey: "sk-model-key-0123",
      inferenceName: "served-judge",
    });
    expectIntended(await ruler(lists, { model: judgeModel, backoffMs: 1 }));
    expect(j.requests).toHaveLength(1);
    expect(j.requests[0].body.model).toBe("served-judge");
    expect(j.requests[0].headers.authorization).toBe("Bearer sk-model-key-0123");
    await expect(ruler(lists, { model: judgeModel, baseURL: j.baseURL })).rejects.toThrow(
      "ruler: model is a Model with its own endpoint; pass no client, baseURL or apiKey beside it",
    );
  });

  it("counts its own retries even when the given client has retries of its own", async () => {
    const j = await withScript([{ status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }, valid]);
    const client = new OpenAI({ baseURL: j.baseURL, apiKey: "x", maxRetries: 5 });
    await expect(ruler(lists, { client, model: "judge-1", maxRetries: 2, backoffMs: 1 })).rejects.toThrow(
      /in 3 attempts/,
    );
    expect(j.requests).toHaveLength(3);
  });

  it("works through webart's in-process client (custom fetch), including a handler that never answers", async () => {
    let calls = 0;
    const client = clientForHandler(async (req: Request) => {
      calls++;
      const body = JSON.parse(await req.text());
      if (calls === 1) return new Promise<Response>(() => {}); // ignores the abort signal entirely
      const step = valid({ url: "", headers: {}, body }) as { content: string };
      const completion = {
        id: "c",
        object: "chat.completion",
        created: 0,
        model: "m",
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: step.content, refusal: null },
            finish_reason: "stop",
            logprobs: null,
          },
        ],
      };
      return new Response(JSON.stringify(completion), { headers: { "content-type": "application/json" } });
    });
    expectIntended(await ruler(lists, { client, model: "local", timeoutMs: 200, backoffMs: 1 }));
    expect(calls).toBe(2);
  });

  it("never logs or reports the API key, even when the server echoes it", async () => {
    const key = "sk-secret-abcdef0123456789";
    const echo = (r: JudgeRequest): Step => ({
      status: 401,
      body: { error: { message: `Incorrect API key provided: ${String(r.headers.authorization)}` } },
    });
    const j = await withScript([echo]);
    const lines: string[] = [];
    const err = await ruler(lists, { baseURL: j.baseURL, apiKey: key, model: "m", debug: (l) => lines.push(l) }).catch(
      (e) => e,
    );
    expect(j.requests[0].headers.authorization).toBe(`Bearer ${key}`);
    expect(err.message).toContain("Incorrect API key provided: Bearer [redacted]");
    expect(err.message).not.toContain(key);
    expect(JSON.stringify(err.attempts)).not.toContain(key);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join("\n")).not.toContain(key);
    await j.close();

    // Debug output of a successful call shows the endpoint, prompt and reply, and no key or query string.
    const k = await withScript([valid]);
    const dbg: string[] = [];
    await ruler(lists, { baseURL: `${k.baseURL}?key=${key}`, apiKey: key, model: "m", debug: (l) => dbg.push(l) });
    const text = dbg.join("\n");
    expect(text).toContain(k.baseURL);
    expect(text).toContain('<trajectory id="3">');
    expect(text).toContain('"trajectory_id": "2"');
    expect(text).not.toContain(key);
  });
});
