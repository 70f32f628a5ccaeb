// The custom task: scenarios from lines, JSONL and CSV (bad input named by line), the seeded train/validation
// split, the scenarios of a step, and single- and multi-turn rollouts through a scripted client.
import { describe, expect, it } from "vitest";
import {
  customStepScenarios,
  parseCsv,
  parseScenarios,
  rolloutCustom,
  scenarioFormatOf,
  ScenarioError,
  splitScenarios,
  warmStartConversations,
} from "./custom.ts";
import { scriptedOpenAI } from "./scripted.ts";
import { isChoice } from "./types.ts";

describe("parseScenarios", () => {
  it("one prompt per line, blank lines and surrounding spaces dropped", () => {
    expect(parseScenarios("  Say hi \n\r\n\nTell a joke\n", "lines")).toEqual([
      { prompt: "Say hi" },
      { prompt: "Tell a joke" },
    ]);
  });

  it("an empty list is refused in every format", () => {
    for (const f of ["lines", "jsonl", "csv"] as const) {
      expect(() => parseScenarios(" \n\n", f)).toThrow(/scenario list is empty/);
    }
    expect(() => parseScenarios("prompt\n", "csv")).toThrow(/scenario list is empty/);
  });

  it("JSONL: prompt plus extra fields (as text, for the judge); a bad line is named by its number", () => {
    const text = '{"prompt": "Capital of France?", "answer": "Paris", "n": 3}\n\n{"prompt": "2+2?"}\n';
    expect(parseScenarios(text, "jsonl")).toEqual([
      { prompt: "Capital of France?", fields: { answer: "Paris", n: "3" } },
      { prompt: "2+2?" },
    ]);
    expect(() => parseScenarios('{"prompt": "a"}\n{"prompt": "b"\n', "jsonl")).toThrow(/^JSONL line 2: not valid JSON/);
    expect(() => parseScenarios('{"prompt": "a"}\n\n["x"]', "jsonl")).toThrow(/^JSONL line 3: expected a JSON object/);
    expect(() => parseScenarios('{"question": "a"}', "jsonl")).toThrow(/^JSONL line 1: no "prompt" field/);
    expect(() => parseScenarios("{oops", "jsonl")).toThrow(ScenarioError);
  });

  it("CSV: quoted commas, quotes and newlines; other columns become fields; no prompt column is refused", () => {
    const text = 'id,Prompt,answer\r\n1,"Hello, world","say ""hi"""\n2,"two\nlines",\n';
    expect(parseScenarios(text, "csv")).toEqual([
      { prompt: "Hello, world", fields: { id: "1", answer: 'say "hi"' } },
      { prompt: "two\nlines", fields: { id: "2" } },
    ]);
    expect(() => parseScenarios("question,answer\nq,a\n", "csv")).toThrow(
      /no "prompt" column \(its header row has: "question", "answer"\)/,
    );
    expect(() => parseScenarios('prompt\n"never closed\n', "csv")).toThrow(
      /CSV line 2: a quoted field is never closed/,
    );
    expect(() => parseScenarios("prompt,x\na,1\n,2\n", "csv")).toThrow(/CSV line 3: the prompt is empty/);
  });

  it("CSV rows keep the line they start on", () => {
    expect(parseCsv('a\n"b\nc"\nd').map((r) => r.line)).toEqual([1, 2, 4]);
  });

  it("the format follows the file name", () => {
    expect(["a.jsonl", "b.NDJSON", "c.csv", "d.txt", "e"].map(scenarioFormatOf)).toEqual([
      "jsonl",
      "jsonl",
      "csv",
      "lines",
      "lines",
    ]);
  });
});

describe("splitScenarios", () => {
  const six = Array.from({ length: 6 }, (_, i) => ({ prompt: `p${i}` }));

  it("20% (at least 1) to validation, the rest to training, every scenario exactly once, same for a seed", () => {
    const a = splitScenarios(six, { seed: 1 });
    expect(a.val.length).toBe(1);
    expect(a.train.length).toBe(5);
    expect([...a.val, ...a.train].map((s) => s.prompt).sort()).toEqual(six.map((s) => s.prompt));
    expect(splitScenarios(six, { seed: 1 })).toEqual(a);
    const seeds = new Set(Array.from({ length: 8 }, (_, s) => splitScenarios(six, { seed: s }).val[0].prompt));
    expect(seeds.size).toBeGreaterThan(1);
    expect(splitScenarios(Array(20).fill({ prompt: "x" }), { seed: 0 }).val.length).toBe(4);
    expect(splitScenarios(six.slice(0, 2), { seed: 0, fraction: 0.9 }).train.length).toBe(1);
  });

  it("fewer than 2 scenarios cannot be split", () => {
    expect(() => splitScenarios(six.slice(0, 1), { seed: 0 })).toThrow(/at least 2/);
  });

  it("a step's scenarios go through the training list in turn, one per group", () => {
    const train = six.slice(0, 5);
    expect(customStepScenarios(0, train, 2).map((s) => s.prompt)).toEqual(["p0", "p1"]);
    expect(customStepScenarios(2, train, 2).map((s) => s.prompt)).toEqual(["p4", "p0"]);
  });
});

describe("rolloutCustom", () => {
  it("single-turn: system, prompt, one sampled choice; notes for the judge in the metadata", async () => {
    const { client, requests } = scriptedOpenAI(() => "Bonjour");
    const t = await rolloutCustom(client, {
      model: "m",
      maxTokens: 8,
      task: { systemPrompt: "Translate to French.", turns: 1 },
      scenario: { prompt: "Hello", fields: { answer: "Bonjour" } },
    });
    expect(requests.length).toBe(1);
    expect(requests[0].messages).toEqual([
      { role: "system", content: "Translate to French." },
      { role: "user", content: "Hello" },
    ]);
    expect(t.messagesAndChoices.length).toBe(3);
    expect(isChoice(t.messagesAndChoices[2])).toBe(true);
    expect(t.metadata.notes).toContain("- answer: Bonjour");
  });

  it("multi-turn: the simulated user (same client) sees the conversation with roles swapped", async () => {
    const { client, requests } = scriptedOpenAI((msgs) =>
      String(msgs[0].content).startsWith("You are a grumpy") ? "Why?" : "Because.",
    );
    const t = await rolloutCustom(client, {
      model: "m",
      task: { systemPrompt: "Be helpful.", turns: 2, userPrompt: "You are a grumpy customer." },
      scenario: { prompt: "My order is late" },
    });
    expect(requests.length).toBe(3);
    expect(requests[1].messages.slice(1)).toEqual([
      { role: "assistant", content: "My order is late" },
      { role: "user", content: "Because." },
    ]);
    const roles = t.messagesAndChoices.map((m) => (isChoice(m) ? "choice" : m.role));
    expect(roles).toEqual(["system", "user", "choice", "user", "choice"]);
    expect(requests[2].messages.at(-1)).toEqual({ role: "user", content: "Why?" });
  });
});

describe("warmStartConversations", () => {
  it("pairs each scenario's prompt with its answer field after the system prompt; scenarios without one are left out", () => {
    const scenarios = parseScenarios(
      '{"prompt": "Name a colour", "answer": "Red"}\n{"prompt": "Name a fruit"}\n{"prompt": "Say hi", "answer": " "}\n',
      "jsonl",
    );
    expect(warmStartConversations({ systemPrompt: "One word." }, scenarios)).toEqual([
      [
        { role: "system", content: "One word." },
        { role: "user", content: "Name a colour" },
        { role: "assistant", content: "Red" },
      ],
    ]);
    expect(warmStartConversations({ systemPrompt: "" }, scenarios)[0][0]).toEqual({
      role: "user",
      content: "Name a colour",
    });
  });
});
