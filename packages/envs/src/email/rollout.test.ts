// The email rollout through the real `openai` SDK against scripted policies: the conversation and requests a
// user's rollout makes, the baselines' scores on held-out scenarios, malformed replies, the turn penalty and
// limit, a full context, and replay from the seed.
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { scriptedOpenAI, type ScriptedPolicy, type ScriptedReply } from "../scripted.ts";
import { isChoice, type Message, type TrajectoryLike } from "../types.ts";
import { firstContentWord, naiveSearcher, perfectSearcher, searchesQuestion, searchKeywords } from "./baselines.ts";
import { EMAIL_REWARD, summarizeEmail } from "./grade.ts";
import { emailScenario, type EmailScenario } from "./inbox.ts";
import { EMAIL_MAX_TURNS, emailSystemPrompt, rolloutEmail } from "./rollout.ts";
import { EMAIL_TOOLS, guidedEmailTools, sentencesOf } from "./tools.ts";

const sampling = { model: "m", temperature: 0.8, maxTokens: 200 };
const play = (policy: ScriptedPolicy, scenario: EmailScenario, extra: object = {}) =>
  rolloutEmail(scriptedOpenAI(policy).client, { ...sampling, scenario, ...extra });
const evalScenarios = Array.from({ length: 50 }, (_, i) => emailScenario("eval", i));
const call = (name: string, args: object): ScriptedReply => ({
  toolCalls: [{ name, arguments: JSON.stringify(args) }],
});

/** The conversation as the model saw it: each Choice as its message. */
const asMessages = (t: TrajectoryLike): Message[] =>
  t.messagesAndChoices.map((m) => (isChoice(m) ? (m.message as Message) : m));

describe("rolloutEmail", () => {
  it("keeps system, question, each Choice and a tool message per call; each request is the conversation so far", async () => {
    const s = evalScenarios[0];
    const server = scriptedOpenAI(perfectSearcher(s));
    const t = await rolloutEmail(server.client, { ...sampling, seed: 9, scenario: s });
    const h = t.messagesAndChoices;
    expect(h.slice(0, 2)).toEqual([
      { role: "system", content: emailSystemPrompt(s) },
      { role: "user", content: s.question.text },
    ]);
    // search, its result, read, the email, the answer.
    expect(h.slice(2).map((m) => (isChoice(m) ? "choice" : m.role))).toEqual([
      "choice",
      "tool",
      "choice",
      "tool",
      "choice",
    ]);
    const choices = h.filter(isChoice);
    for (const [i, m] of h.entries()) {
      if (isChoice(m) || m.role !== "tool") continue;
      const before = h[i - 1];
      expect(isChoice(before) && before.message.tool_calls![0].id).toBe(m.tool_call_id);
    }
    expect(server.requests.length).toBe(3);
    for (const [i, req] of server.requests.entries()) {
      expect(req.messages).toEqual(asMessages(t).slice(0, 2 + 2 * i));
      expect(req).toMatchObject({
        model: "m",
        tools: EMAIL_TOOLS,
        tool_choice: "auto",
        parallel_tool_calls: false,
        temperature: 0.8,
        max_completion_tokens: 200,
        logprobs: true,
      });
    }
    expect(new Set(server.requests.map((r) => r.seed)).size).toBe(3); // one sampling seed per turn
    expect(JSON.parse(String((h[3] as Message).content))[0].message_id).toBe(s.question.messageId);
    expect(JSON.parse(String((h[5] as Message).content)).message_id).toBe(s.question.messageId);
    expect(
      choices.map((c) => c.message.tool_calls![0].type === "function" && c.message.tool_calls![0].function.name),
    ).toEqual(["search_inbox", "read_email", "return_final_answer"]);
    expect(t.tools).toBe(EMAIL_TOOLS);
    expect(t.reward).toBe(1);
    expect(t.metrics).toMatchObject({
      turns: 3,
      correct: true,
      rightMessage: true,
      searches: 1,
      reads: 1,
      malformed: false,
    });
    expect(t.metadata).toMatchObject({ game: "email", seed: s.seed, split: "eval", messageId: s.question.messageId });
    // Plain JSON all the way (what a judge or ART reads back).
    expect(JSON.parse(JSON.stringify(t))).toEqual(t);
  });

  it("the perfect searcher answers all 50 held-out questions in three turns; the naive one far fewer, but some", async () => {
    const perfect = summarizeEmail(await Promise.all(evalScenarios.map((s) => play(perfectSearcher(s), s))));
    expect(perfect).toEqual({
      episodes: 50,
      accuracy: 1,
      rightMessage: 1,
      answered: 1,
      malformed: 0,
      wellFormedCalls: 1,
      contextFull: 0,
      meanTurns: 3,
      meanReward: 1,
    });
    const naive = summarizeEmail(await Promise.all(evalScenarios.map((s) => play(naiveSearcher(), s))));
    expect(naive.accuracy).toBeGreaterThan(0.05);
    expect(naive.accuracy).toBeLessThan(0.5);
    expect(naive.rightMessage).toBeGreaterThanOrEqual(naive.accuracy);
    expect(naive.malformed).toBe(0);
    expect(firstContentWord("When is the dentist appointment Dana mentioned?")).toBe("dentist");
    expect(firstContentWord("What time does Dana's flight to Oslo leave?")).toBe("dana");
    expect(searchKeywords('{"keywords": ["Dentist", "dana"]}')).toEqual(["Dentist", "dana"]);
    expect(searchKeywords('{"keywords": ["dentist"')).toEqual([]);
    expect(searchesQuestion(["Dentist", "dana"], "When is the dentist appointment Dana mentioned?")).toBe(true);
    expect(searchesQuestion(["dentist", "oslo"], "When is the dentist appointment Dana mentioned?")).toBe(false);
    expect(searchesQuestion([], "When is it?")).toBe(false);
  });

  it("a reply without a tool call, an unknown tool or unusable arguments scores -1 and ends the episode", async () => {
    const s = evalScenarios[1];
    const bad: (string | ScriptedReply)[] = [
      "The appointment is on Tuesday.",
      call("send_email", { to: "x" }),
      { toolCalls: [{ name: "search_inbox", arguments: '{"keywords": ["dentist"' }] },
      call("return_final_answer", { answer: "Tuesday" }),
    ];
    for (const reply of bad) {
      let turn = 0;
      const t = await play(() => (turn++ === 0 ? call("search_inbox", { keywords: ["hello"] }) : reply), s);
      expect(t.reward).toBe(EMAIL_REWARD.malformed);
      expect(t.metrics).toMatchObject({ malformed: true, turns: 2, answered: false });
      expect(t.messagesAndChoices.filter(isChoice).length).toBe(2);
      expect(isChoice(t.messagesAndChoices[t.messagesAndChoices.length - 1])).toBe(true);
      expect(t.logs[0]).toMatch(/^turn 2: (no tool call|malformed call)/);
      // One of its two calls was well-formed; with the perfect searcher's episode, 4 of 5.
      expect(summarizeEmail([t]).wellFormedCalls).toBe(0.5);
      expect(summarizeEmail([t, await play(perfectSearcher(s), s)]).wellFormedCalls).toBeCloseTo(0.8, 12);
    }
  });

  it("an unknown id is a legal call: the error goes back to the model and the episode goes on", async () => {
    const s = evalScenarios[2];
    const q = s.question;
    const replies = [
      call("read_email", { message_id: "m0" }),
      call("return_final_answer", { answer: q.answer, message_id: q.messageId }),
    ];
    let turn = 0;
    const t = await play(() => replies[turn++], s);
    expect(JSON.parse(String((t.messagesAndChoices[3] as Message).content))).toEqual({
      error: 'message_id "m0": no such email (ids look like "m1234")',
    });
    expect(t.metrics).toMatchObject({ malformed: false, turns: 2, correct: true });
    expect(t.reward).toBe(1);
  });

  it("takes a small penalty per turn past three; the right email with a wrong answer gets half", async () => {
    const s = evalScenarios[3];
    const q = s.question;
    for (const extra of [0, 1, 4]) {
      let turn = 0;
      const t = await play(() => {
        turn++;
        if (turn <= extra + 1) return call("search_inbox", { keywords: q.keywords });
        if (turn === extra + 2) return call("read_email", { message_id: q.messageId });
        return call("return_final_answer", { answer: q.answer, message_id: q.messageId });
      }, s);
      expect(t.metrics.turns).toBe(3 + extra);
      expect(t.reward).toBeCloseTo(1 - EMAIL_REWARD.turnPenalty * extra, 12);
    }
    const wrong = await play(() => call("return_final_answer", { answer: "no idea", message_id: q.messageId }), s);
    expect([wrong.reward, wrong.metrics.rightMessage, wrong.metrics.correct]).toEqual([0.5, true, false]);
    const elsewhere = await play(() => call("return_final_answer", { answer: q.answer, message_id: "m0" }), s);
    expect([elsewhere.reward, elsewhere.metrics.correct]).toEqual([0, false]);
  });

  it("ends unanswered at the turn limit, or when the conversation outgrows the model's context", async () => {
    const s = evalScenarios[4];
    const searching = () => call("search_inbox", { keywords: s.question.keywords });
    const t = await play(searching, s);
    expect(t.metrics).toMatchObject({ turns: EMAIL_MAX_TURNS, answered: false, malformed: false, searches: 8 });
    expect(t.reward).toBeCloseTo(-EMAIL_REWARD.turnPenalty * (EMAIL_MAX_TURNS - 3), 12);
    expect((await play(searching, s, { maxTurns: 4 })).metrics.turns).toBe(4);
    // A server that refuses the third request as too long for the context, as webart's and OpenAI's do.
    const server = scriptedOpenAI(searching);
    let n = 0;
    const full = new OpenAI({
      apiKey: "x",
      baseURL: "http://127.0.0.1/v1",
      maxRetries: 0,
      fetch: async (url, init) =>
        ++n < 3
          ? server.fetch(url, init)
          : Response.json(
              { error: { message: "maximum context length is 1024 tokens", code: "context_length_exceeded" } },
              { status: 400 },
            ),
    });
    const cut = await rolloutEmail(full, { ...sampling, scenario: s });
    expect(cut.metrics).toMatchObject({ turns: 2, contextFull: true, answered: false });
    expect(cut.logs.at(-1)).toBe("no answer after 2 turns (context full)");
    expect(summarizeEmail([cut, t])).toMatchObject({ contextFull: 0.5, answered: 0, meanTurns: 5 });
    // Other errors are the caller's.
    await expect(play(() => Promise.reject(new Error("down")), s)).rejects.toThrow(/down/);
  });

  it("tool_choice required is sent when asked; the same seed replays the same episode", async () => {
    const s = emailScenario("train", 5);
    const server = scriptedOpenAI(naiveSearcher());
    const a = await rolloutEmail(server.client, { ...sampling, scenario: s, toolChoice: "required" });
    expect(server.requests.every((r) => r.tool_choice === "required")).toBe(true);
    const b = await play(naiveSearcher(), emailScenario("train", 5));
    expect(asMessages(b).map((m) => ("tool_calls" in m ? m.tool_calls : m.content))).toEqual(
      asMessages(a).map((m) => ("tool_calls" in m ? m.tool_calls : m.content)),
    );
    expect(b.reward).toBe(a.reward);
  });

  it("guided: the call is forced and each value is limited to what the episode has shown; the prompt's tools stay", async () => {
    type Guided = { function: { name: string; parameters: { properties: Record<string, Record<string, unknown>> } } };
    for (const s of evalScenarios.slice(0, 10)) {
      const server = scriptedOpenAI(perfectSearcher(s, { sender: false }));
      const t = await rolloutEmail(server.client, { ...sampling, scenario: s, toolChoice: "guided" });
      expect(t.metrics).toMatchObject({ correct: true });
      const q = s.question;
      const reqs = server.requests.map((r) => r as typeof r & { guided_tools: Guided[] });
      const turns = reqs.map((r) =>
        Object.fromEntries(r.guided_tools.map((g) => [g.function.name, g.function.parameters.properties])),
      );
      for (const r of reqs) expect([r.tool_choice, r.tools]).toEqual(["required", EMAIL_TOOLS]);
      // Turn 1: no id has been seen, so no read; the search words are the question's, the answer "not found" or none.
      expect(Object.keys(turns[0])).toEqual(["search_inbox", "return_final_answer"]);
      const words = (turns[0].search_inbox.keywords.items as { enum: string[] }).enum;
      for (const k of q.keywords.flatMap((x) => x.split(" "))) expect(words).toContain(k);
      for (const w of words) expect(q.text).toContain(w);
      expect(turns[0].return_final_answer.answer.enum).toEqual(["not found"]);
      expect(turns[0].return_final_answer.message_id.enum).toEqual(["none"]);
      // Turn 2: the ids the search named; turn 3: phrases of the email read, the right answer among them.
      expect(turns[1].read_email.message_id.enum).toContain(q.messageId);
      expect(turns[2].return_final_answer.answer.enum).toContain(q.answer);
      expect(turns[2].return_final_answer.message_id.enum).toContain(q.messageId);
    }
  });

  it("guided answers are runs of a sentence's words as written, never across sentences or a snippet's cut", () => {
    const body =
      "Hello Kofi,\n\nAll done, the rental car booking is made. The confirmation code is KHMG6P.\n\nBest,\nYuki";
    const results = [
      JSON.stringify([{ message_id: "m1", subject: "Rental car", snippet: "…ne, the rental car booking is ma…" }]),
      JSON.stringify({ message_id: "m1", subject: "Rental car", body }),
    ];
    const final = guidedEmailTools("What is the code Yuki got?", results).find(
      (t) => t.function.name === "return_final_answer",
    )!;
    const answers = (final.function.parameters as { properties: { answer: { enum: string[] } } }).properties.answer
      .enum;
    for (const a of [
      "All done, the rental car booking is made.",
      "All done, the rental car booking is made",
      "All done,",
      "All done",
      "KHMG6P",
      "The confirmation code is KHMG6P.",
      "Yuki",
      "Best",
      "the rental car booking",
    ])
      expect(answers, a).toContain(a);
    for (const a of ["made. The", "made The", "Best, Yuki", "Kofi, All", "ne, the", "…ne,", "ma…", "booking is ma"])
      expect(answers, a).not.toContain(a);
  });

  it("explore: an answer after a read is asked again as a forced call of a sentence of the email read", async () => {
    type Req = { tool_choice: unknown; guided_tools: { function: { name: string; parameters: unknown } }[] };
    for (const [i, s] of evalScenarios.slice(0, 6).entries()) {
      const server = scriptedOpenAI(perfectSearcher(s, { sender: false }));
      const t = await rolloutEmail(server.client, {
        ...sampling,
        scenario: s,
        toolChoice: "guided",
        explore: 1,
        seed: i,
      });
      expect(t.metrics.explored).toBe(true);
      const reqs = server.requests as unknown as Req[];
      // search, read, the answer the policy chose (dropped), then the forced one.
      expect(reqs.map((r) => r.tool_choice)).toEqual([
        "required",
        "required",
        "required",
        { type: "function", function: { name: "return_final_answer" } },
      ]);
      const fixed = reqs[3].guided_tools;
      expect(fixed.map((f) => f.function.name)).toEqual(["return_final_answer"]);
      const { answer, message_id } = (
        fixed[0].function.parameters as { properties: Record<string, { enum: string[] }> }
      ).properties;
      expect(message_id.enum).toEqual([s.question.messageId]);
      const body = s.inbox.emails.find((e) => e.id === s.question.messageId)!.body;
      expect(sentencesOf(body)).toContain(answer.enum[0]);
      // The trajectory holds the forced reply alone: one answer call after the search and the read.
      const names = asMessages(t).flatMap((m) => ("tool_calls" in m ? (m.tool_calls ?? []) : []));
      expect(names.map((c) => (c as { function: { name: string } }).function.name)).toEqual([
        "search_inbox",
        "read_email",
        "return_final_answer",
      ]);
    }
    await expect(play(perfectSearcher(evalScenarios[0]), evalScenarios[0], { explore: 0.5 })).rejects.toThrow(
      /explore needs toolChoice "guided"/,
    );
  });
});
