// Prompt building, prefix deduplication and reply parsing on fixed inputs (no network).
import { describe, expect, it } from "vitest";
import type { Message, Tool } from "@webart/engine";
import { buildJudgePrompt, commonPrefixLength, DEFAULT_RUBRIC, scoresResponseFormat, systemPrompt } from "./prompt.ts";
import { extractJsonObject, parseScores, RefusedReply } from "./reply.ts";

const sys: Message = { role: "system", content: "Play tic-tac-toe as X." };
const user: Message = { role: "user", content: "Your move." };
const say = (content: string): Message => ({ role: "assistant", content });
const tools: Tool[] = [{ type: "function", function: { name: "move", parameters: { type: "object" } } }];

describe("prefix deduplication", () => {
  it("counts whole equal messages, ignoring key order, and stops at the first difference", () => {
    const a = [sys, user, say("B2"), user];
    const b = [{ content: sys.content, role: "system" } as Message, user, say("B2"), say("A1")];
    expect(commonPrefixLength([a, b])).toBe(3);
    expect(commonPrefixLength([a, b, [sys, { role: "user", content: "Your move!" }]])).toBe(1);
    expect(commonPrefixLength([a, [say("x"), ...a]])).toBe(0);
    // One list being a prefix of another: the shorter one has nothing of its own left.
    expect(commonPrefixLength([a.slice(0, 2), a])).toBe(2);
  });
});

describe("buildJudgePrompt", () => {
  it("sends the shared prefix once, then each trajectory's remaining messages under its id", () => {
    const p = buildJudgePrompt(
      [
        [sys, user, say("B2")],
        [sys, user, say("A1"), { role: "user", content: "Illegal" }],
      ],
      DEFAULT_RUBRIC,
      tools,
    );
    expect(p.ids).toEqual(["1", "2"]);
    expect(p.prefixLength).toBe(2);
    expect(p.messages).toHaveLength(2);
    expect(p.messages[0]).toEqual({ role: "system", content: systemPrompt(DEFAULT_RUBRIC) });
    expect(p.messages[1].content).toBe(
      `Tools the agent could call:
<tools>
[{"type":"function","function":{"name":"move","parameters":{"type":"object"}}}]
</tools>

Conversation every trajectory starts with (shown once):
<shared_context>
[{"role":"system","content":"Play tic-tac-toe as X."},{"role":"user","content":"Your move."}]
</shared_context>

Trajectories (the messages after the shared context):

<trajectory id="1">
[{"role":"assistant","content":"B2"}]
</trajectory>

<trajectory id="2">
[{"role":"assistant","content":"A1"},{"role":"user","content":"Illegal"}]
</trajectory>`,
    );
  });

  it("has no context block when nothing is shared, and shows a lone trajectory whole", () => {
    const two = buildJudgePrompt(
      [
        [sys, say("a")],
        [user, say("b")],
      ],
      "- be right",
      undefined,
    );
    expect(two.prefixLength).toBe(0);
    expect(two.messages[1].content).toBe(
      `Trajectories:\n\n<trajectory id="1">\n${JSON.stringify([sys, say("a")])}\n</trajectory>\n\n` +
        `<trajectory id="2">\n${JSON.stringify([user, say("b")])}\n</trajectory>`,
    );
    const one = buildJudgePrompt([[sys, user, say("B2")]], DEFAULT_RUBRIC);
    expect(one.prefixLength).toBe(0);
    expect(one.messages[1].content).toBe(
      `Trajectories:\n\n<trajectory id="1">\n${JSON.stringify([sys, user, say("B2")])}\n</trajectory>`,
    );
  });

  it("puts the rubric in the system message; a user rubric replaces the default", () => {
    const def = String(buildJudgePrompt([[say("a")], [say("b")]], DEFAULT_RUBRIC).messages[0].content);
    expect(def).toContain(`Rubric:\n${DEFAULT_RUBRIC}\n`);
    // The default rubric's four points: goal far above no goal, efficiency, proportional gaps, partial credit.
    expect(DEFAULT_RUBRIC.split("\n")).toHaveLength(4);
    expect(DEFAULT_RUBRIC).toMatch(/reaches the goal must score far above/);
    expect(DEFAULT_RUBRIC).toMatch(/fewer wasted steps/);
    expect(DEFAULT_RUBRIC).toMatch(/gaps should track quality gaps/);
    expect(DEFAULT_RUBRIC).toMatch(/partial credit/);
    const mine = String(buildJudgePrompt([[say("a")], [say("b")]], "- Shorter answers win.").messages[0].content);
    expect(mine).toContain("Rubric:\n- Shorter answers win.\n");
    expect(mine).not.toContain(DEFAULT_RUBRIC.split("\n")[0]);
  });

  it("asks for a strict JSON schema whose ids are the judged ones", () => {
    const f = scoresResponseFormat(["1", "2", "3"]);
    expect(f.type).toBe("json_schema");
    expect(f.json_schema.strict).toBe(true);
    type Item = { required: string[]; properties: Record<string, { enum?: string[] }>; additionalProperties: boolean };
    const item = (f.json_schema.schema as { properties: { scores: { items: Item } } }).properties.scores.items;
    expect(item.required).toEqual(["trajectory_id", "explanation", "score"]);
    expect(Object.keys(item.properties)).toEqual(["trajectory_id", "explanation", "score"]);
    expect(item.properties.trajectory_id.enum).toEqual(["1", "2", "3"]);
    expect(item.additionalProperties).toBe(false);
  });
});

describe("reply parsing", () => {
  const answer = {
    scores: [
      { trajectory_id: "2", explanation: "won", score: 1 },
      { trajectory_id: "1", explanation: "lost", score: 0.25 },
    ],
  };
  const json = JSON.stringify(answer);

  it("matches scores by id, not position", () => {
    expect(parseScores(json, ["1", "2"])).toEqual([
      { trajectoryId: "1", score: 0.25, explanation: "lost" },
      { trajectoryId: "2", score: 1, explanation: "won" },
    ]);
  });

  it("finds the object inside a ```json fence, after leading text, or after a think block with braces", () => {
    expect(extractJsonObject("```json\n" + json + "\n```")).toEqual(answer);
    expect(extractJsonObject("Here are my scores: " + json + "\nHope that helps.")).toEqual(answer);
    expect(extractJsonObject(`<think>maybe {score: high} for "}" id 2</think>\n` + json)).toEqual(answer);
    expect(() => extractJsonObject("I cannot grade these.")).toThrow(RefusedReply);
  });

  it("refuses bad answers with the reason", () => {
    const ids = ["1", "2", "3"];
    const s = (id: unknown, score: unknown) => ({ trajectory_id: id, explanation: "", score });
    const reason = (scores: unknown[]) => {
      try {
        parseScores(JSON.stringify({ scores }), ids);
      } catch (e) {
        return (e as RefusedReply).reason;
      }
      return "accepted";
    };
    expect(reason([s("1", 0), s("2", 0), s("7", 0)])).toMatch(
      /trajectory_id "7" is not one of "1", "2", "3".*no score for trajectory "3"/,
    );
    expect(reason([s("1", 0), s("2", 0), s("2", 0)])).toMatch(/"2" appears more than once/);
    expect(reason([s("1", 0), s("2", 0)])).toMatch(/expected 3 scores, got 2.*no score for trajectory "3"/);
    expect(reason([s("1", 0), s("2", 0), s("3", 0), s("4", 0)])).toMatch(/expected 3 scores, got 4/);
    expect(reason([s("1", 1.7), s("2", 0), s("3", 0)])).toMatch(/score for trajectory "1" is 1.7, outside \[0, 1\]/);
    expect(reason([s("1", -0.1), s("2", 0), s("3", 0)])).toMatch(/is -0.1, outside/);
    expect(reason([s("1", "0.5"), s("2", 0), s("3", 0)])).toMatch(/is "0.5", expected a finite number/);
    expect(reason([s("1", null), s("2", 0), s("3", 0)])).toMatch(/is null, expected a finite number/);
    expect(reason([s(1, 0.5), s("2", 0), s("3", 0)])).toBe("accepted");
    expect(() => parseScores('{"scores":[{"trajectory_id":"1","explanation":"","score":NaN}]}', ["1"])).toThrow(
      /not JSON/,
    );
    expect(() => parseScores('{"verdicts":[]}', ["1"])).toThrow(/"scores" array/);
  });

  it("clamps finite out-of-range scores only when asked; non-numbers are refused either way", () => {
    const text = JSON.stringify({
      scores: [
        { trajectory_id: "1", explanation: "", score: 1.7 },
        { trajectory_id: "2", explanation: "", score: -3 },
      ],
    });
    expect(parseScores(text, ["1", "2"], true).map((x) => x.score)).toEqual([1, 0]);
    expect(() => parseScores(text, ["1", "2"], false)).toThrow(/outside/);
    const str = JSON.stringify({ scores: [{ trajectory_id: "1", explanation: "", score: "0.5" }] });
    expect(() => parseScores(str, ["1"], true)).toThrow(/expected a finite number/);
  });
});
