// The custom task's loop pieces through real openai clients whose fetch is a tiny scripted server: a step's
// groups judged with each scenario's notes, validation of base against checkpoint, and the judge check's messages.
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { checkJudge, customStepGroups, JudgeCheckError, validateCustomTask } from "./custom.ts";

type Body = { model: string; messages: { role: string; content: string }[]; response_format?: unknown };

/** A client whose server answers each chat request with `answer(body)`: a text, or [status, error message]. */
function server(answer: (b: Body) => string | [number, string]) {
  const bodies: Body[] = [];
  const fetch = async (_url: string | URL | Request, init?: RequestInit) => {
    const body = JSON.parse(String(init?.body)) as Body;
    bodies.push(body);
    const a = answer(body);
    if (Array.isArray(a)) return Response.json({ error: { message: a[1] } }, { status: a[0] });
    return Response.json({
      id: "c",
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: a, refusal: null } }],
    });
  };
  return { client: new OpenAI({ apiKey: "x", baseURL: "http://judge.test/v1", fetch, maxRetries: 0 }), bodies };
}

/** Scores trajectory "1" 0.2 and "2" 0.9 (and so on), as RULER's schema asks. */
const scoring = (b: Body) => {
  const n = (b.messages[1].content.match(/<trajectory id=/g) ?? []).length;
  return JSON.stringify({
    scores: Array.from({ length: n }, (_, i) => ({
      trajectory_id: String(i + 1),
      explanation: `#${i + 1}`,
      score: i ? 0.9 : 0.2,
    })),
  });
};

let counter = 0;
const policy = () => server(() => `reply ${++counter}`);
const task = { systemPrompt: "Answer briefly.", turns: 1 };

describe("custom task", () => {
  it("a step: one scenario per group, each group judged with the rubric and the scenario's notes", async () => {
    const judge = server(scoring);
    const groups = await customStepGroups(policy().client, 0, {
      task,
      train: [{ prompt: "a", fields: { answer: "A" } }, { prompt: "b" }],
      groupsPerStep: 2,
      groupSize: 2,
      model: "m",
      temperature: 1,
      maxTokens: 8,
      judge: { client: judge.client, model: "j" },
      rubric: "Shorter is better.",
    });
    expect(groups.map((g) => g.trajectories.map((t) => t.reward))).toEqual([
      [0.2, 0.9],
      [0.2, 0.9],
    ]);
    expect(groups[0].trajectories[1].logs).toEqual(["RULER score 0.9: #2"]);
    expect(judge.bodies[0].messages[0].content).toContain("Shorter is better.\n\nNotes on this scenario");
    expect(judge.bodies[0].messages[0].content).toContain("- answer: A");
    expect(judge.bodies[1].messages[0].content).not.toContain("Notes on this scenario");
  });

  it("validation: the base model's conversation (adapter off) and the checkpoint's, judged side by side", async () => {
    const judge = server(scoring);
    let off = false;
    const seen: boolean[] = [];
    const p = server(() => (seen.push(off), off ? "base" : "tuned"));
    const v = await validateCustomTask(p.client, {
      task,
      val: [{ prompt: "x" }, { prompt: "y" }],
      model: "m",
      temperature: 1,
      maxTokens: 8,
      judge: { client: judge.client, model: "j" },
      withBaseModel: async (fn) => {
        off = true;
        try {
          return await fn();
        } finally {
          off = false;
        }
      },
    });
    expect(seen).toEqual([true, true, false, false]);
    expect(v.base).toBeCloseTo(0.2);
    expect(v.checkpoint).toBeCloseTo(0.9);
    expect(v.groups[0].trajectories.map((t) => t.metadata.policy)).toEqual(["base", "checkpoint"]);
  });

  it("the judge check says which way a judge fails", async () => {
    await expect(checkJudge({ client: server(scoring).client, model: "j" })).resolves.toBeUndefined();
    await expect(checkJudge({ client: server(() => "Trajectory 2 is better.").client, model: "j" })).rejects.toThrow(
      /answered, but not in RULER's JSON schema/,
    );
    await expect(
      checkJudge({ client: server(() => [400, "response_format json_schema is not supported"]).client, model: "j" }),
    ).rejects.toThrow(/refused response_format json_schema/);
    await expect(checkJudge({ client: server(() => [404, "model j not found"]).client, model: "j" })).rejects.toThrow(
      /refused the request: HTTP 404/,
    );
    // In the schema, but scores no judge means: a model too weak to judge (webart serve's webart-tools did this).
    const wild = JSON.stringify({
      scores: [
        { trajectory_id: "2", explanation: "", score: 3.5e72 },
        { trajectory_id: "2", explanation: "", score: 0 },
      ],
    });
    await expect(checkJudge({ client: server(() => wild).client, model: "j" })).rejects.toThrow(
      /answered in RULER's JSON schema, but with scores RULER cannot use \(.*outside \[0, 1\].*\): .*Pick a stronger model/,
    );
    const down = new OpenAI({ apiKey: "x", baseURL: "http://127.0.0.1:9/v1", maxRetries: 0 });
    const e = await checkJudge({ client: down, model: "j" }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(JudgeCheckError);
    expect((e as Error).message).toMatch(
      /^The judge j at http:\/\/127\.0\.0\.1:9\/v1 does not answer \(connection failed/,
    );
  });
});
