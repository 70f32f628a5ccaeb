// The viewer's messages from a real email episode: the scripted perfect searcher plays through a real `openai`
// client (envs' scripted server), so the conversation holds real tool_calls, Choices and tool results.
import { expect, it } from "vitest";
import { emailScenario, perfectSearcher, rolloutEmail, scriptedOpenAI } from "webart/envs";
import type { MessageOrChoice } from "webart/engine";
import { roleLabel } from "./format.ts";
import { callLine, messageViews } from "./messages.ts";

it("shows each tool call with its arguments and each tool result with the call it answers", async () => {
  const s = emailScenario("eval", 3);
  const { client } = scriptedOpenAI(perfectSearcher(s));
  const t = await rolloutEmail(client, { scenario: s, model: "m", temperature: 1, maxTokens: 100 });
  expect(t.metrics.correct).toBe(true);
  const v = messageViews(t.messagesAndChoices as MessageOrChoice[]);
  expect(v.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]);
  expect(v[1]).toEqual({ role: "user", content: s.question.text });
  expect(v[2].toolCalls?.map((c) => c.name)).toEqual(["search_inbox"]);
  expect(JSON.parse(v[2].toolCalls![0].arguments).keywords).toEqual(s.question.keywords);
  expect(v[3]).toMatchObject({ toolCallId: v[2].toolCalls![0].id, toolName: "search_inbox" });
  expect(v[4].toolCalls?.map((c) => c.name)).toEqual(["read_email"]);
  expect(v[5]).toMatchObject({ toolCallId: v[4].toolCalls![0].id, toolName: "read_email" });
  expect(v[5].content).toContain(s.question.messageId);
  expect(callLine(v[6].toolCalls![0])).toBe(
    `return_final_answer(${JSON.stringify({ answer: s.question.answer, message_id: s.question.messageId })})`,
  );
});

it("keeps a reply without tool calls as its text, and a result whose call is missing without a name", () => {
  const v = messageViews([
    {
      role: "user",
      content: [
        { type: "text", text: "hi " },
        { type: "text", text: "there" },
      ],
    },
    { role: "tool", tool_call_id: "nowhere", content: "{}" },
  ] as MessageOrChoice[]);
  expect(v[0]).toEqual({ role: "user", content: "hi there" });
  expect(v[1]).toEqual({ role: "tool", content: "{}", toolCallId: "nowhere" });
});

it("marks a reply the server forced (an exploration move), and only that one", async () => {
  const { client } = scriptedOpenAI(() => "<move>B2</move>");
  const forced = (await client.chat.completions.create({ model: "m", messages: [] })).choices[0];
  const sampled = (await client.chat.completions.create({ model: "m", messages: [] })).choices[0];
  const v = messageViews([
    { role: "user", content: "board" },
    { ...forced, forced: true },
    { role: "user", content: "board" },
    sampled,
  ] as MessageOrChoice[]);
  expect(v.map((m) => m.forced)).toEqual([undefined, true, undefined, undefined]);
  expect(v.map(roleLabel)).toEqual(["user", "assistant (forced: exploring)", "user", "assistant"]);
});
