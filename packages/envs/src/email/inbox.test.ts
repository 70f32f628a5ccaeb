// The inbox generator, the tools and the grading: seeds replay, splits never meet, exactly one email answers each
// question while others share its words, searches and calls behave as their descriptions say, and answers are
// matched and rewarded as documented.
import { describe, expect, it } from "vitest";
import { answerMatches, EMAIL_REWARD, emailReward, normalizeAnswer } from "./grade.ts";
import {
  checkScenario,
  emailScenario,
  emailScenarioSeed,
  emailSplitOf,
  newEmailScenario,
  type EmailScenario,
  type Inbox,
} from "./inbox.ts";
import { MAX_SEARCH_RESULTS, searchInbox } from "./search.ts";
import { callTool } from "./tools.ts";
import { FIRST_NAMES, LAST_NAMES } from "./words.ts";

const ids = (r: ReturnType<typeof searchInbox>) => ("error" in r ? r : r.results.map((x) => x.message_id));
const text = (inbox: Inbox, id: string) => {
  const e = inbox.emails.find((x) => x.id === id)!;
  return `${e.subject}\n${e.body}`.toLowerCase();
};

describe("email scenarios", () => {
  it("the same seed gives the same inbox and question; other seeds give others", () => {
    expect(newEmailScenario(42)).toEqual(newEmailScenario(42));
    expect(emailScenario("eval", 7)).toEqual(newEmailScenario(emailScenarioSeed("eval", 7)));
    const questions = new Set(Array.from({ length: 50 }, (_, i) => emailScenario("train", i).question.text));
    expect(questions.size).toBeGreaterThan(45);
  });

  it("training and evaluation seeds never meet, whatever the index", () => {
    const big = [2 ** 31 - 1, 2 ** 31, 2 ** 31 + 5, 2 ** 40 + 3, 1_000_003 * 9999 + 7];
    const indexes = [...Array(2000).keys(), ...big];
    const train = new Set(indexes.map((i) => emailScenarioSeed("train", i)));
    const evalSeeds = indexes.map((i) => emailScenarioSeed("eval", i));
    expect(evalSeeds.filter((s) => train.has(s))).toEqual([]);
    expect([...train].every((s) => emailSplitOf(s) === "train" && Number.isSafeInteger(s))).toBe(true);
    expect(evalSeeds.every((s) => emailSplitOf(s) === "eval")).toBe(true);
    expect(new Set(evalSeeds.slice(0, 2000)).size).toBe(2000);
    expect(() => emailScenarioSeed("train", -1)).toThrow("email scenario index -1: expected an integer >= 0");
    expect(() => emailScenarioSeed("eval", 1.5)).toThrow(/1.5/);
  });

  it("20–50 emails; exactly one answers the question; its words find it alone, its first word finds more", () => {
    const sizes = new Set<number>();
    const kinds = new Set<string>();
    for (let i = 0; i < 400; i++) {
      const s: EmailScenario = emailScenario(i % 2 ? "eval" : "train", i);
      const { inbox, question: q } = s;
      sizes.add(inbox.emails.length);
      kinds.add(q.kind);
      expect(inbox.emails.length).toBeGreaterThanOrEqual(20);
      expect(inbox.emails.length).toBeLessThanOrEqual(50);
      expect(new Set(inbox.emails.map((e) => e.id)).size).toBe(inbox.emails.length);
      const dates = inbox.emails.map((e) => e.date);
      expect(dates).toEqual([...dates].sort());
      expect(dates.every((d) => new Date(d).toISOString() === d && d.slice(0, 10) < inbox.today)).toBe(true);
      // Exactly one email states the asked fact, and it holds the answer.
      const fact = inbox.facts[q.messageId];
      expect(inbox.emails.filter((e) => inbox.facts[e.id] === fact).map((e) => e.id)).toEqual([q.messageId]);
      expect(text(inbox, q.messageId)).toContain(q.answer.toLowerCase());
      expect(ids(searchInbox(inbox, { keywords: q.keywords, from: q.from }))).toEqual([q.messageId]);
      // Distractors: other emails share the question's first search word, and one of them states a fact too.
      const sharing = inbox.emails.filter((e) => e.id !== q.messageId && text(inbox, e.id).includes(q.keywords[0]));
      expect(sharing.length).toBeGreaterThanOrEqual(1);
      expect(sharing.some((e) => inbox.facts[e.id])).toBe(true);
      expect(checkScenario(inbox, q)).toBeNull();
    }
    expect(kinds).toEqual(new Set(["appointment", "place", "cost", "flight", "booking", "bring"]));
    expect(Math.min(...sizes)).toBeLessThan(25);
    expect(Math.max(...sizes)).toBeGreaterThan(45);
  });

  it("checkScenario refuses a question that two emails answer", () => {
    const { inbox, question: q } = emailScenario("train", 1);
    const other = inbox.emails.find((e) => e.id !== q.messageId)!;
    const twice: Inbox = { ...inbox, facts: { ...inbox.facts, [other.id]: inbox.facts[q.messageId] } };
    expect(checkScenario(twice, q)).toMatch(/^2 emails answer/);
  });

  it("no first name is part of another person's name or address (the from filter matches substrings)", () => {
    const everyone = FIRST_NAMES.flatMap((f) =>
      LAST_NAMES.map((l) => ({ f, from: `${f} ${l} <${f}.${l}@example.com>` })),
    );
    for (const name of FIRST_NAMES) {
      const hits = everyone.filter((p) => p.from.toLowerCase().includes(name.toLowerCase()) && p.f !== name);
      expect(
        hits.map((p) => p.from),
        name,
      ).toEqual([]);
    }
  });
});

describe("search_inbox and read_email", () => {
  const { inbox, question: q } = emailScenario("eval", 3);

  it("every keyword must match, in any case; from and dates filter; newest first, at most the limit", () => {
    const all = searchInbox(inbox, { keywords: ["a"] });
    if ("error" in all) throw new Error(all.error);
    expect(all.results.length).toBe(
      Math.min(MAX_SEARCH_RESULTS, inbox.emails.filter((e) => text(inbox, e.id).includes("a")).length),
    );
    expect(all.results.map((r) => r.date)).toEqual(
      all.results
        .map((r) => r.date)
        .sort()
        .reverse(),
    );
    const upper = ids(searchInbox(inbox, { keywords: q.keywords.map((k) => k.toUpperCase()) }));
    expect(upper).toEqual(ids(searchInbox(inbox, { keywords: q.keywords })));
    expect(upper).toContain(q.messageId);
    const both = ids(searchInbox(inbox, { keywords: [...q.keywords, "zebra"] }));
    expect(both).toEqual([]);
    const e = inbox.emails.find((x) => x.id === q.messageId)!;
    const day = e.date.slice(0, 10);
    expect(
      ids(searchInbox(inbox, { keywords: q.keywords, after: day, before: e.date.slice(0, 11) + "23:59:59Z" })),
    ).toContain(q.messageId);
    expect(ids(searchInbox(inbox, { keywords: q.keywords, before: day }))).not.toContain(q.messageId);
    expect(ids(searchInbox(inbox, { keywords: q.keywords, from: "nobody" }))).toEqual([]);
    const found = searchInbox(inbox, { keywords: q.keywords, from: q.from });
    if ("error" in found) throw new Error(found.error);
    expect(found.results[0].snippet.toLowerCase()).toContain(q.keywords[0]);
  });

  it("bad values get an error text back", () => {
    expect(searchInbox(inbox, { keywords: [] })).toEqual({ error: expect.stringMatching(/at least one/) });
    expect(searchInbox(inbox, { keywords: ["x"], before: "next week" })).toEqual({
      error: 'before: "next week" is not an ISO date (e.g. 2024-03-05)',
    });
  });

  it("a call is malformed only when it cannot be carried out; a legal call with a bad value gets an error text", () => {
    const malformed = (name: string, args: string) => callTool(inbox, name, args).type === "malformed";
    expect(malformed("send_email", "{}")).toBe(true);
    expect(malformed("search_inbox", "{keywords: dentist}")).toBe(true);
    expect(malformed("search_inbox", '["dentist"]')).toBe(true);
    expect(malformed("search_inbox", "{}")).toBe(true);
    expect(malformed("search_inbox", '{"keywords": "dentist"}')).toBe(true);
    expect(malformed("search_inbox", '{"keywords": ["x"], "from": 3}')).toBe(true);
    expect(malformed("read_email", '{"id": "m1234"}')).toBe(true);
    expect(malformed("return_final_answer", '{"answer": "3pm"}')).toBe(true);
    expect(callTool(inbox, "search_inbox", "{}")).toEqual({
      type: "malformed",
      reason: 'search_inbox: "keywords" is missing, expected a list of strings',
    });
    expect(callTool(inbox, "read_email", '{"message_id": "m0"}')).toEqual({
      type: "result",
      tool: "read_email",
      content: JSON.stringify({ error: 'message_id "m0": no such email (ids look like "m1234")' }),
    });
    const read = callTool(inbox, "read_email", JSON.stringify({ message_id: q.messageId }));
    if (read.type !== "result") throw new Error(read.type);
    const e = inbox.emails.find((x) => x.id === q.messageId)!;
    expect(JSON.parse(read.content)).toEqual({
      message_id: e.id,
      from: e.from,
      to: e.to,
      date: e.date,
      subject: e.subject,
      body: e.body,
    });
    expect(callTool(inbox, "search_inbox", '{"keywords": ["x"], "after": "soon", "from": null}').type).toBe("result");
    expect(callTool(inbox, "return_final_answer", '{"answer": "3pm", "message_id": " m12 "}')).toEqual({
      type: "final",
      answer: "3pm",
      messageId: "m12",
    });
  });
});

describe("grading", () => {
  it("answers match after normalizing case, whitespace and punctuation, as whole words, and briefly", () => {
    expect(normalizeAnswer("  Tuesday,  3PM! ")).toBe("tuesday 3pm");
    expect(answerMatches("It is on tuesday 3pm.", "Tuesday 3pm")).toBe(true);
    expect(answerMatches("240 dollars", "$240")).toBe(true);
    expect(answerMatches("11:30am", "11:30am")).toBe(true);
    expect(answerMatches("Tuesday at 3pm", "Tuesday 3pm")).toBe(false);
    expect(answerMatches("13pm", "3pm")).toBe(false);
    expect(answerMatches("", "3pm")).toBe(false);
    const long = `${"word ".repeat(EMAIL_REWARD.maxAnswerWords)}3pm`;
    expect(answerMatches(long, "3pm")).toBe(false);
  });

  it("rewards: 1 right, 0.5 right email only, 0 otherwise, the turn penalty past three turns, -1 malformed", () => {
    const o = { turns: 3, malformed: false, answered: true, rightMessage: true, correct: true };
    expect(emailReward(o)).toBe(1);
    expect(emailReward({ ...o, turns: 2 })).toBe(1);
    expect(emailReward({ ...o, turns: 5 })).toBeCloseTo(1 - 2 * EMAIL_REWARD.turnPenalty, 12);
    expect(emailReward({ ...o, correct: false })).toBe(0.5);
    expect(emailReward({ ...o, rightMessage: false, correct: false })).toBe(0);
    expect(emailReward({ ...o, answered: false, rightMessage: false, correct: false, turns: 8 })).toBeCloseTo(-0.1, 12);
    expect(emailReward({ ...o, malformed: true, turns: 8 })).toBe(-1);
  });
});
