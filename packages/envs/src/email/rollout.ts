// One email-search episode through the `openai` SDK, written as a user of ART writes a rollout: each turn is a chat
// completion offered the tools; the assistant's Choice and a `tool` message per call go into the conversation
// and the trajectory; return_final_answer, a malformed reply or the turn limit ends it. Only the Choices are
// trained; the tool results are plain messages, so RULER (or a person) reads the trajectory as a chat.
import OpenAI from "openai";
import { Rng } from "@webart/gpu";
import { turnSeed } from "../rollout.ts";
import type { Message, MessagesAndChoices, SamplingOptions, TrajectoryLike } from "../types.ts";
import { answerMatches, emailReward, type EmailOutcome } from "./grade.ts";
import { emailSplitOf, weekdayOf, type EmailScenario } from "./inbox.ts";
import { callTool, EMAIL_TOOLS, fixedAnswerTool, guidedEmailTools, sentencesOf } from "./tools.ts";

/** Model turns (chat completions) before an episode without an answer ends. */
export const EMAIL_MAX_TURNS = 8;

export function emailSystemPrompt(s: EmailScenario, maxTurns = EMAIL_MAX_TURNS): string {
  return (
    `You are an email assistant for ${s.inbox.owner}. Today is ${weekdayOf(s.inbox.today)} ${s.inbox.today}. ` +
    `Answer the user's question from their inbox: search_inbox finds emails, read_email opens one, and ` +
    `return_final_answer gives a short answer with the id of the email it comes from. ` +
    `Call one tool per turn; you have ${maxTurns} turns.`
  );
}

export interface EmailRolloutOptions extends SamplingOptions {
  scenario: EmailScenario;
  /** Default EMAIL_MAX_TURNS. */
  maxTurns?: number;
  /**
   * Exploration, with guided calls (training only): when the model answers after reading an email, with this
   * probability the answer is instead a whole sentence or line of the email read last, drawn at random and asked of
   * the model as a forced call (the server marks it forced: trained only toward, outside the KL term). It tries
   * answers the model is sure are wrong. Default 0.
   */
  explore?: number;
}

export async function rolloutEmail(client: OpenAI, opts: EmailRolloutOptions): Promise<TrajectoryLike> {
  const { scenario, model, temperature, maxTokens, seed } = opts;
  const maxTurns = opts.maxTurns ?? EMAIL_MAX_TURNS;
  const messages: Message[] = [
    { role: "system", content: emailSystemPrompt(scenario, maxTurns) },
    { role: "user", content: scenario.question.text },
  ];
  const history: MessagesAndChoices = [...messages];
  const logs: string[] = [];
  const o: EmailOutcome = { turns: 0, malformed: false, answered: false, rightMessage: false, correct: false };
  let searches = 0;
  let reads = 0;
  let contextFull = false;
  let answer: { answer: string; messageId: string } | null = null;
  const guided = opts.toolChoice === "guided";
  // Tool results so far: what a guided call's values come from.
  const results: string[] = [];
  const explore = opts.explore ?? 0;
  if (!(Number.isFinite(explore) && explore >= 0 && explore <= 1))
    throw new Error(`email: explore must be a probability from 0 to 1 (got ${explore})`);
  if (explore && !guided)
    throw new Error(`email: explore needs toolChoice "guided" (got ${opts.toolChoice ?? "auto"})`);
  // The draws are the episode's own (a group's episodes share the scenario, and must explore apart).
  const rng = new Rng(seed ?? Math.floor(Math.random() * 2 ** 31));
  let lastRead: { id: string; body: string } | null = null;
  let explored = false;

  while (o.turns < maxTurns && !answer && !o.malformed) {
    let completion: OpenAI.Chat.Completions.ChatCompletion;
    const request = {
      model,
      messages,
      tools: EMAIL_TOOLS,
      tool_choice: opts.toolChoice === "guided" ? ("required" as const) : (opts.toolChoice ?? "auto"),
      // webart's extension (ChatRequest.guided_tools); the openai SDK passes unknown fields through.
      ...(guided ? { guided_tools: guidedEmailTools(scenario.question.text, results) } : {}),
      parallel_tool_calls: false,
      temperature,
      max_completion_tokens: maxTokens,
      logprobs: true,
      ...(seed === undefined ? {} : { seed: turnSeed(seed, o.turns) }),
    };
    try {
      completion = await client.chat.completions.create(request);
      const answers = completion.choices[0]?.message.tool_calls?.some(
        (c) => c.type === "function" && c.function.name === "return_final_answer",
      );
      const sentences = explore && answers && lastRead ? sentencesOf(lastRead.body) : [];
      if (lastRead && sentences.length && rng.next() < explore) {
        // This reply is dropped; the trajectory holds the forced one.
        explored = true;
        const forced = {
          ...request,
          tool_choice: { type: "function" as const, function: { name: "return_final_answer" } },
          guided_tools: [fixedAnswerTool(sentences[rng.int(sentences.length)], lastRead.id)],
        };
        completion = await client.chat.completions.create(forced);
      }
    } catch (e) {
      // The conversation outgrew the model's context: the episode ends unanswered, like running out of turns.
      if (e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded") {
        contextFull = true;
        logs.push(`turn ${o.turns + 1}: ${e.message}`);
        break;
      }
      throw e;
    }
    const choice = completion.choices[0];
    if (!choice) throw new Error(`chat completion from model "${model}" has no choices`);
    o.turns++;
    messages.push(choice.message);
    history.push(choice);
    const calls = choice.message.tool_calls ?? [];
    if (!calls.length) {
      o.malformed = true;
      logs.push(
        `turn ${o.turns}: no tool call in the reply: ${JSON.stringify((choice.message.content ?? "").slice(0, 120))}`,
      );
    }
    for (const call of calls) {
      const r =
        call.type === "function"
          ? callTool(scenario.inbox, call.function.name, call.function.arguments)
          : { type: "malformed" as const, reason: `a ${call.type} tool call, not a function call` };
      if (r.type === "malformed") {
        o.malformed = true;
        logs.push(`turn ${o.turns}: malformed call: ${r.reason}`);
        break;
      }
      if (r.type === "final") {
        answer = r;
        break;
      }
      if (r.tool === "search_inbox") searches++;
      else {
        reads++;
        const e = JSON.parse(r.content) as { message_id?: unknown; body?: unknown };
        if (typeof e.message_id === "string" && typeof e.body === "string")
          lastRead = { id: e.message_id, body: e.body };
      }
      results.push(r.content);
      const result: Message = { role: "tool", tool_call_id: call.id, content: r.content };
      messages.push(result);
      history.push(result);
    }
  }

  const q = scenario.question;
  if (answer) {
    o.answered = true;
    o.rightMessage = answer.messageId === q.messageId;
    o.correct = o.rightMessage && answerMatches(answer.answer, q.answer);
    logs.push(
      `answer ${JSON.stringify(answer.answer)} from ${answer.messageId}; expected ${JSON.stringify(q.answer)} from ${q.messageId}`,
    );
  } else if (!o.malformed) logs.push(`no answer after ${o.turns} turns${contextFull ? " (context full)" : ""}`);
  return {
    messagesAndChoices: history,
    tools: EMAIL_TOOLS,
    reward: emailReward(o),
    metrics: { ...o, searches, reads, contextFull, ...(explore ? { explored } : {}) },
    metadata: {
      game: "email",
      seed: scenario.seed,
      split: emailSplitOf(scenario.seed),
      kind: q.kind,
      question: q.text,
      answer: q.answer,
      messageId: q.messageId,
    },
    logs,
  };
}
