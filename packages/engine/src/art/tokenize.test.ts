// The trained mask of a multi-turn tool conversation (system, user, three assistant tool calls, two tool results)
// sampled for real through the engine's openai client, as an email agent's rollout makes it: tokenizeHistory
// trains exactly the ids the sampler produced for each assistant turn, each placed after exactly the prompt the
// sampler was given, and nothing of the tool results, the user turn or the template's own tokens. On the embedded
// model (Qwen-style template, Hermes <tool_call> blocks, <tool_response> results) and on a tiny Llama 3.1-style
// model (bare JSON calls, ipython results).
import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAllowed } from "./allowed.ts";
import { Engine } from "../engine.ts";
import { writeLlama3Model } from "../openai/testing.ts";
import { removeDir, tempDir } from "../weights/testing.ts";
import { tokenizeHistory, type TokenizedHistory } from "./tokenize.ts";
import { isChoice, Trajectory, TrajectoryGroup, type MessageOrChoice, type SampledChoice } from "./trajectories.ts";
import { computeAdvantages } from "./advantages.ts";
import { stepSequences } from "./train-step.ts";
import { resolveTrainConfig } from "./train-config.ts";

const TOOLS: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "search_inbox",
      description: "Find emails by keywords.",
      parameters: {
        type: "object",
        properties: {
          keywords: { type: "array", items: { enum: ["dentist", "Dana"] }, maxItems: 2 },
          from: { enum: ["Dana", "Sam"] },
        },
        required: ["keywords"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "read_email",
      description: "Read one email.",
      parameters: {
        type: "object",
        properties: { message_id: { enum: ["m4821", "m1234"] } },
        required: ["message_id"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "return_final_answer",
      description: "Answer and end.",
      parameters: {
        type: "object",
        properties: { answer: { enum: ["Tuesday 3pm", "Monday 9am"] }, message_id: { enum: ["m4821", "m1234"] } },
        required: ["answer", "message_id"],
        additionalProperties: false,
      },
    },
  },
];
const SYSTEM = "You answer questions from the user's inbox.";
const QUESTION = "When is the dentist appointment Dana mentioned?";
const CALLS = ["search_inbox", "read_email", "return_final_answer"];
const RESULTS = [
  '[{"message_id":"m4821","snippet":"my dentist appointment is Tuesday 3pm"}]',
  '{"message_id":"m4821","from":"Dana","body":"My dentist appointment is Tuesday 3pm."}',
];

const CONTEXT = 4096;

/** Gives the model in `dir` room for CONTEXT positions: the tools' JSON alone fills most of the tiny models' own. */
async function stretchContext(dir: string): Promise<void> {
  const config = JSON.parse(await readFile(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
  await writeFile(join(dir, "config.json"), JSON.stringify({ ...config, max_position_embeddings: CONTEXT }));
}

interface Conversation {
  history: MessageOrChoice[];
  choices: SampledChoice[];
  /** The prompt ids the scheduler was given for each request, as it received them. */
  prompts: number[][];
  promptTokens: number[];
}

/** The rollout: each turn forced to the next call (the tiny models are random), its result sent back. */
async function converse(engine: Engine): Promise<Conversation> {
  const prompts: number[][] = [];
  const generate = engine.scheduler.generate.bind(engine.scheduler);
  engine.scheduler.generate = (req, onToken) => {
    prompts.push([...req.promptIds]);
    return generate(req, onToken);
  };
  try {
    const client = engine.openaiClient();
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: SYSTEM },
      { role: "user", content: QUESTION },
    ];
    const history: MessageOrChoice[] = [...messages];
    const choices: SampledChoice[] = [];
    const promptTokens: number[] = [];
    for (const [turn, name] of CALLS.entries()) {
      const r = await client.chat.completions.create({
        model: engine.name,
        messages,
        tools: TOOLS,
        tool_choice: { type: "function", function: { name } },
        max_tokens: 300,
        temperature: 1,
        seed: 10 + turn,
        logprobs: true,
      });
      const c = r.choices[0] as SampledChoice;
      choices.push(c);
      promptTokens.push(r.usage!.prompt_tokens);
      messages.push(c.message);
      history.push(c);
      if (turn < RESULTS.length) {
        const result = { role: "tool" as const, tool_call_id: c.message.tool_calls![0].id, content: RESULTS[turn] };
        messages.push(result);
        history.push(result);
      }
    }
    return { history, choices, prompts, promptTokens };
  } finally {
    engine.scheduler.generate = generate;
  }
}

/** The maximal runs of trained positions: sequence index, start, end. */
function trainedRuns(seqs: TokenizedHistory[]): { s: number; start: number; end: number }[] {
  const runs: { s: number; start: number; end: number }[] = [];
  seqs.forEach((q, s) => {
    for (let i = 0; i < q.mask.length; i++) {
      if (!q.mask[i]) continue;
      const start = i;
      while (i < q.mask.length && q.mask[i]) i++;
      runs.push({ s, start, end: i });
    }
  });
  return runs;
}

const startsWith = (a: number[], prefix: number[]) => a.length >= prefix.length && prefix.every((x, i) => a[i] === x);

function checkMask(engine: Engine, conv: Conversation, o: { header: string; resultWrapper: string }) {
  const tok = engine.tokenizer;
  const text = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: false });
  expect(conv.prompts.length).toBe(3);
  // Each sampled turn is the forced call and ends the turn with a stop token.
  conv.choices.forEach((c, k) => {
    expect(c.finish_reason).toBe("tool_calls");
    const call = c.message.tool_calls![0];
    expect(call.type === "function" && call.function.name).toBe(CALLS[k]);
    expect(text(c.token_ids!)).toContain(CALLS[k]);
    expect(tok.stopTokenIds).toContain(c.token_ids!.at(-1));
    expect(conv.prompts[k].length).toBe(conv.promptTokens[k]);
    // The template's assistant header closes the prompt: context, not trained.
    expect(text(conv.prompts[k]).endsWith(o.header)).toBe(true);
  });

  // Through the trajectory, as training reads it (and as it reads one back from disk).
  const t = new Trajectory({ messagesAndChoices: conv.history, tools: TOOLS, reward: 1 });
  const seqs = t.histories().flatMap((h) => tokenizeHistory(tok, h));
  const back = Trajectory.fromJSON(JSON.parse(JSON.stringify(t.toJSON())));
  expect(back.histories().flatMap((h) => tokenizeHistory(tok, h))).toEqual(seqs);

  const runs = trainedRuns(seqs);
  expect(runs.length).toBe(3);
  runs.forEach((r, k) => {
    const q = seqs[r.s];
    const c = conv.choices[k];
    // Exactly the sampler's ids and logprobs, after exactly the prompt the sampler was given.
    expect(q.ids.slice(r.start, r.end)).toEqual(c.token_ids);
    expect([...q.oldLogprobs.slice(r.start, r.end)]).toEqual(c.token_logprobs!.map(Math.fround));
    expect(q.ids.slice(0, r.start)).toEqual(conv.prompts[k]);
  });
  // A forced call is drawn from the sets its tool's schema allows: each token's set rides along, holds the token, and
  // is the sequence's at exactly that position (null in the context).
  runs.forEach((r, k) => {
    const q = seqs[r.s];
    const c = conv.choices[k];
    const V = engine.config.vocabSize;
    const sets = decodeAllowed(c.token_allowed!, c.token_ids!.length, `choice ${k}`, Math.ceil(V / 32));
    expect(q.allowed!.slice(r.start, r.end)).toEqual(sets);
    c.token_ids!.forEach((id, t) => expect(sets[t] === null || (sets[t]![id >>> 5] >>> (id & 31)) & 1).toBeTruthy());
    expect(sets.filter((m) => m).length).toBeGreaterThan(c.token_ids!.length / 2);
  });
  for (const q of seqs) q.mask.forEach((m, i) => m || expect(q.allowed![i]).toBeNull());
  // A step's sequences carry the sets to the trainer; a set from another vocabulary is refused, naming the trajectory.
  const rewarded = (reward: number) => new Trajectory({ messagesAndChoices: conv.history, tools: TOOLS, reward });
  const group = new TrajectoryGroup([rewarded(1), rewarded(0)]);
  const step = stepSequences(engine, [group], computeAdvantages([group], false), resolveTrainConfig(), 0);
  expect(step.seqs.map((q) => q.allowed)).toEqual([...seqs, ...seqs].map((q) => q.allowed));
  const other = structuredClone(conv.history) as SampledChoice[];
  for (const c of other.filter(isChoice)) c.token_allowed!.sets = c.token_allowed!.sets.map(() => btoa("\0\0\0\0"));
  const foreign = new TrajectoryGroup(
    [1, 0].map((reward) => new Trajectory({ messagesAndChoices: other, tools: TOOLS, reward })),
  );
  expect(() => stepSequences(engine, [foreign], computeAdvantages([foreign], false), resolveTrainConfig(), 0)).toThrow(
    /trajectory 0 of group 0 has a token_allowed set of 32 tokens, but this model's vocabulary needs/,
  );
  const sampled = conv.choices.reduce((a, c) => a + c.token_ids!.length, 0);
  expect(seqs.reduce((a, q) => a + q.trainableTokens, 0)).toBe(sampled);
  for (const q of seqs) q.mask.forEach((m, i) => expect(Number.isNaN(q.oldLogprobs[i])).toBe(m === 0));

  // A turn continues the previous sequence exactly when its prompt extends the previous prompt and sample.
  const splits = conv.prompts
    .slice(1)
    .filter((p, k) => !startsWith(p, [...conv.prompts[k], ...conv.choices[k].token_ids!])).length;
  expect(seqs.length).toBe(1 + splits);

  // What is trained holds no tool result, user or system text, nor the template's own wrappers; the last
  // sequence's context holds them all.
  const trained = text(seqs.flatMap((q) => q.ids.filter((_, i) => q.mask[i])));
  for (const s of [SYSTEM, QUESTION, ...RESULTS, o.header, o.resultWrapper]) expect(trained).not.toContain(s);
  const last = seqs[seqs.length - 1];
  const context = text(last.ids.filter((_, i) => !last.mask[i]));
  for (const s of [QUESTION, ...RESULTS, o.resultWrapper]) expect(context).toContain(s);
  return { sequences: seqs.length, sampled };
}

describe("the trained mask of a tool conversation", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await tempDir("webart-mask-");
  });
  afterAll(() => removeDir(dir));

  const run = async (model: string, o: { header: string; resultWrapper: string }) => {
    await stretchContext(join(dir, model));
    const engine = await Engine.load(join(dir, model), { name: model, kvSlots: 2, maxContext: CONTEXT, tune: false });
    try {
      return checkMask(engine, await converse(engine), o);
    } finally {
      await engine.close();
    }
  };

  it("embedded model (Qwen-style template, Hermes <tool_call> blocks, <tool_response> results)", async () => {
    await cp(join(import.meta.dirname, "../../../../models/webart-tiny"), join(dir, "tiny"), { recursive: true });
    await run("tiny", { header: "<|im_start|>assistant\n", resultWrapper: "<tool_response>" });
  });

  it("tiny Llama 3.1-style model (bare JSON calls, ipython results; arguments rendered as objects)", async () => {
    await writeLlama3Model(join(dir, "llama3"));
    await run("llama3", {
      header: "<|start_header_id|>assistant<|end_header_id|>\n\n",
      resultWrapper: "<|start_header_id|>ipython<|end_header_id|>",
    });
  });
});

describe("context turns the model did not sample", () => {
  it("are anchored exactly: the plain assistant turn's tokens through its end of turn, nothing trained", async () => {
    const dir = await tempDir("webart-anchor-");
    try {
      await cp(join(import.meta.dirname, "../../../../models/webart-tiny"), join(dir, "tiny"), { recursive: true });
      const engine = await Engine.load(join(dir, "tiny"), { name: "tiny", kvSlots: 2, tune: false });
      try {
        const tok = engine.tokenizer;
        const text = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: false });
        // A scripted opening (as tic-tac-toe's decision start shows it), then a turn sampled for real.
        const messages: ChatCompletionMessageParam[] = [
          { role: "system", content: "You play x." },
          { role: "user", content: "  1 2 3\nA . . .\nB . . .\nC . . ." },
          { role: "assistant", content: "<move>A1</move>" },
          { role: "user", content: "  1 2 3\nA x . .\nB . o .\nC . . ." },
        ];
        const r = await engine.openaiClient().chat.completions.create({
          model: "tiny",
          messages,
          max_tokens: 12,
          temperature: 1,
          seed: 3,
          logprobs: true,
        });
        const c = r.choices[0] as SampledChoice;
        const t = new Trajectory({ messagesAndChoices: [...messages, c], reward: 1 });
        const [q, ...rest] = t.histories().flatMap((h) => tokenizeHistory(tok, h, { anchors: true }));
        expect(rest).toEqual([]);
        const anchor = q.anchor!;
        const anchored = [...anchor.keys()].filter((i) => anchor[i]);
        // One contiguous run: the opening move and its end of turn, right after the first assistant header.
        expect(anchored.at(-1)! - anchored[0] + 1).toBe(anchored.length);
        expect(text(q.ids.slice(anchored[0], anchored.at(-1)! + 1)).trim()).toBe("<move>A1</move><|im_end|>");
        expect(text(q.ids.slice(0, anchored[0])).endsWith("<|im_start|>assistant\n")).toBe(true);
        expect(text(q.ids.slice(0, anchored[0]))).not.toContain("A x");
        // Never a trained token, and the trained tokens are still exactly the sample.
        q.mask.forEach((m, i) => expect(m && anchor[i]).toBe(0));
        expect(q.ids.filter((_, i) => q.mask[i])).toEqual(c.token_ids);
        // A history with no plain assistant turn anchors nothing.
        const plain = new Trajectory({ messagesAndChoices: [messages[0], messages[1], c], reward: 1 });
        for (const s of plain.histories().flatMap((h) => tokenizeHistory(tok, h, { anchors: true })))
          expect(s.anchor!.every((a) => a === 0)).toBe(true);
        // A forced reply (guided_choice of one, as tic-tac-toe's exploration asks) is trained and marked forced;
        // the sampled turn after it is trained and not.
        const client = engine.openaiClient();
        const ask = async (m: ChatCompletionMessageParam[], extra: Record<string, unknown> = {}) =>
          (await client.chat.completions.create({ model: "tiny", messages: m, max_tokens: 12, ...extra }))
            .choices[0] as SampledChoice;
        const turn1 = messages.slice(0, 2);
        const f = await ask(turn1, { guided_choice: ["<move>C3</move>"] });
        const turn2: ChatCompletionMessageParam = { role: "user", content: "  1 2 3\nA . o .\nB . . .\nC . . x" };
        const s2 = await ask([...turn1, { role: "assistant", content: f.message.content }, turn2]);
        const mixed = new Trajectory({ messagesAndChoices: [...turn1, f, turn2, s2], reward: 1 });
        const [m, ...more] = mixed.histories().flatMap((h) => tokenizeHistory(tok, h));
        expect(more).toEqual([]);
        expect(m.ids.filter((_, i) => m.mask[i])).toEqual([...f.token_ids!, ...s2.token_ids!]);
        expect(m.ids.filter((_, i) => m.forced![i])).toEqual(f.token_ids);
        m.forced!.forEach((x, i) => expect(!x || m.mask[i]).toBeTruthy());
        expect(tokenizeHistory(tok, { messagesAndChoices: [...messages, c] })[0].forced).toBeUndefined();
        expect(m.allowed).toBeUndefined(); // a forced reply is trained as forced, not over its sets
        // A step trains the forced turn only toward it: with a negative advantage only the sampled turn is trained.
        const rewarded = (reward: number) => new Trajectory({ messagesAndChoices: [...turn1, f, turn2, s2], reward });
        const group = new TrajectoryGroup([rewarded(1), rewarded(0)]);
        const adv = computeAdvantages([group], false);
        const { seqs } = stepSequences(engine, [group], adv, resolveTrainConfig(), 0);
        expect(seqs.map((q) => q.advantage)).toEqual([0.5, -0.5]);
        const trained = (q: (typeof seqs)[number]) => Array.from(q.ids).filter((_, i) => q.mask[i]);
        expect(trained(seqs[0])).toEqual([...f.token_ids!, ...s2.token_ids!]);
        expect(trained(seqs[1])).toEqual(s2.token_ids);
        expect(seqs.map((q) => q.n)).toEqual([f.token_ids!.length + s2.token_ids!.length, s2.token_ids!.length]);
      } finally {
        await engine.close();
      }
    } finally {
      await removeDir(dir);
    }
  });
});
