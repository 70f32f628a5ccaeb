// Pretraining's third step: full-parameter supervised fine-tuning with the engine (f32 weights, every parameter
// trained) on the assistant tokens of the transcripts (tool calls as the chat template writes them), in phases that
// end at a target rate (tic-tac-toe: legal moves; email: well-formed tool calls) or a time limit; the weights are
// written as f32 in HF names after every evaluation, so a stopped run leaves its latest model.
import { join } from "node:path";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import {
  Engine,
  FullTrainer,
  tensorShapes,
  tokenizeHistory,
  writeSafetensors,
  type Message,
  type SampledChoice,
  type SftSequence,
} from "@webart/engine";
import {
  emailScenario,
  rolloutEmail,
  rolloutTicTacToe,
  searchesQuestion,
  searchKeywords,
  summarizeTicTacToe,
  type Tool,
} from "@webart/envs";
import { Rng } from "@webart/gpu";
import { runTorchPhase, writeSequences } from "./torch.ts";

/** The optimizer of every pretraining phase but its learning rate (python/torch_sft.py uses the same). */
export const SFT_ADAMW = {
  beta1: 0.9,
  beta2: 0.99,
  eps: 1e-8,
  weightDecay: 0.01,
  maxGradNorm: 1,
  microBatchTokens: 2048,
};

export interface SftOptions {
  seed: number;
  /** Sequences per step, peak learning rate, games per evaluation. */
  batch: number;
  lr: number;
  evalGames: number;
  /** Weight of the non-assistant tokens (system prompt, boards) in the loss; 0: assistant tokens only. */
  contextWeight: number;
  /** Steps of the learning-rate warm-up; default 50. */
  warmup?: number;
}

export interface Eval {
  legal: number;
  win: number;
  draw: number;
  invalid: number;
}

/** The email agent at temperature 1 on held-out inboxes: well-formed tool calls among all its turns, and its answers. */
export interface EmailEval {
  wellFormed: number;
  /** Episodes whose first call searches only words of the question (any case): whether the model reads it. */
  fromQuestion: number;
  turns: number;
  accuracy: number;
  rightMessage: number;
}

/** A conversation to train on, with the tools it was offered (none for the games). */
export interface Transcript {
  messages: Message[];
  tools?: Tool[];
  /** Indices of assistant messages kept as context but not trained (a scripted slip the model should not learn). */
  untrained?: number[];
}

export interface PhaseResult<E = Eval> {
  name: string;
  steps: number;
  minutes: number;
  sequences: number;
  last: E;
}

/** How a phase measures the model: the rate its target is on, a log line, and what pretrain.json keeps. */
type Measure<E> = (step: number) => Promise<{ rate: number; line: string; result: E }>;

export class Sft {
  private client: ReturnType<Engine["openaiClient"]>;

  private constructor(
    private engine: Engine,
    public trainer: FullTrainer,
    private readonly out: string,
    private readonly o: SftOptions,
    private readonly log: (m: string) => void,
    private readonly loadOpts: { name: string; maxContext: number },
  ) {
    this.client = engine.openaiClient();
  }

  /** Loads the model folder `out` (written by writeStart) with f32 weights for training; `maxContext` holds the
   *  longest transcript and evaluation episode. */
  static async load(
    out: string,
    o: SftOptions,
    log: (m: string) => void,
    { name = "webart-tiny", maxContext = 512 } = {},
  ): Promise<Sft> {
    const engine = await Engine.load(out, { weightsF32: true, kvSlots: 64, maxContext, name });
    return new Sft(engine, new FullTrainer(engine.model), out, o, log, { name, maxContext });
  }

  /** Loads the folder's weights again (after another trainer wrote them). */
  private async reload(): Promise<void> {
    await this.engine.close();
    const { name, maxContext } = this.loadOpts;
    this.engine = await Engine.load(this.out, { weightsF32: true, kvSlots: 64, maxContext, name });
    this.trainer = new FullTrainer(this.engine.model);
    this.client = this.engine.openaiClient();
  }

  /**
   * One phase trained by PyTorch (`--trainer torch`, torch.ts): the same sequences and recipe as `phase`, from the
   * folder's current weights, for `minutes`; `val` is held out for its loss. The engine then loads the result and
   * measures it once.
   */
  async torchPhase<E>(
    name: string,
    convs: Transcript[],
    val: Transcript[],
    minutes: number,
    measure: Measure<E>,
    lrScale = 1,
  ): Promise<PhaseResult<E> & { torch: unknown }> {
    const data = convs.flatMap((c) => this.toSequences(c));
    const dir = join(this.out, ".pretrain");
    mkdirSync(dir, { recursive: true });
    const file = (k: string) => join(dir, `${name.replace(/\W+/g, "-")}-${k}`);
    writeSequences(file("train.bin"), data);
    writeSequences(
      file("val.bin"),
      val.flatMap((c) => this.toSequences(c)),
    );
    this.log(
      `${name} phase (torch): ${data.length} sequences, ${data.reduce((s, q) => s + q.ids.length, 0)} tokens, ${minutes.toFixed(1)} min`,
    );
    const { seed, batch, lr } = this.o;
    const p0 = performance.now();
    let report: { steps: number };
    try {
      await runTorchPhase(
        {
          dir: this.out,
          data: file("train.bin"),
          val: file("val.bin"),
          report: file("report.json"),
          minutes,
          batch,
          lr: lr * lrScale,
          seed,
          warmup: this.o.warmup ?? 50,
        },
        this.log,
      );
      report = JSON.parse(readFileSync(file("report.json"), "utf8")) as { steps: number };
    } finally {
      // The sequences are rebuilt from the transcripts each run; a failed phase leaves its last saved weights.
      rmSync(dir, { recursive: true, force: true });
    }
    await this.reload();
    const e = await measure(report.steps);
    this.log(`${name} eval: ${e.line}`);
    const phaseMin = (performance.now() - p0) / 60000;
    return {
      name,
      steps: report.steps,
      minutes: Number(phaseMin.toFixed(1)),
      sequences: data.length,
      last: e.result,
      torch: report,
    };
  }

  /** The text of an assistant turn as the model writes it: its content, or its tool calls as the chat template
   *  writes them (which is what the engine parses back into tool_calls when the model samples it). */
  private assistantText(m: Message & { role: "assistant" }): string {
    if (!m.tool_calls?.length) return String(m.content ?? "");
    const tok = this.engine.tokenizer;
    const open = "<|im_start|>assistant\n";
    const rendered = tok.applyChatTemplate([{ role: "user", content: "." }, m], {});
    const body = rendered.slice(rendered.lastIndexOf(open) + open.length);
    const end = body.lastIndexOf("<|im_end|>");
    if (end < 0)
      throw new Error(`the chat template wrote no <|im_end|> after an assistant turn: ${JSON.stringify(body)}`);
    return body.slice(0, end);
  }

  /** Assistant messages become "sampled" turns (their ids + <|im_end|>), so SFT sees exactly the RL layout. */
  toSequences({ messages, tools, untrained = [] }: Transcript): SftSequence[] {
    const tok = this.engine.tokenizer;
    const imEnd = tok.inner.tokenToId("<|im_end|>")!;
    const mc = messages.map((m, i) => {
      if (m.role !== "assistant" || untrained.includes(i)) return m;
      const text = this.assistantText(m);
      const ids = [...tok.encode(text), imEnd];
      const calls = m.tool_calls?.length ? m.tool_calls : undefined;
      const c: SampledChoice = {
        index: 0,
        finish_reason: calls ? "tool_calls" : "stop",
        logprobs: null,
        message: {
          role: "assistant",
          content: calls ? null : text,
          refusal: null,
          ...(calls ? { tool_calls: calls } : {}),
        },
        token_ids: ids,
        token_logprobs: ids.map(() => 0),
      };
      return c;
    });
    // Assistant tokens weigh 1; every other token --context-weight. Tried at 0.1-0.25: the board tokens are
    // learned, but legality did not improve.
    const w = this.o.contextWeight;
    return tokenizeHistory(tok, { messagesAndChoices: mc, tools }).map((t) => ({
      ids: t.ids,
      mask: Array.from(t.mask, (m) => (m ? 1 : w)),
    }));
  }

  /** The phase measure of tic-tac-toe: legal moves over `games` games (the target's rate), and the results. */
  ticTacToe(games: number): Measure<Eval> {
    return async (step) => {
      const e = await this.evaluate(games, 1_000_000 + step);
      const line = `${(100 * e.legal).toFixed(1)}% legal moves; win ${e.win.toFixed(2)} draw ${e.draw.toFixed(2)} invalid games ${e.invalid.toFixed(2)}`;
      return { rate: e.legal, line, result: e };
    };
  }

  /** The phase measure of the email agent: well-formed tool calls over the turns of `episodes` held-out episodes
   *  (temperature 1, 200 tokens a turn), and how many answers were right. */
  email(episodes: number): Measure<EmailEval> {
    return async () => {
      this.engine.scheduler.invalidateCache();
      const ts = await Promise.all(
        Array.from({ length: episodes }, (_, i) =>
          rolloutEmail(this.client, {
            model: this.engine.name,
            scenario: emailScenario("eval", i),
            temperature: 1,
            maxTokens: 200,
          }),
        ),
      );
      const sum = (k: string) => ts.reduce((s, t) => s + Number(t.metrics?.[k] ?? 0), 0);
      const turns = sum("turns");
      const fromQuestion = ts.filter((t) => {
        const first = t.messagesAndChoices.find((m) => "message" in m);
        const call = first && "message" in first ? first.message.tool_calls?.[0] : undefined;
        if (call?.type !== "function" || call.function.name !== "search_inbox") return false;
        return searchesQuestion(searchKeywords(call.function.arguments), String(t.metadata?.question ?? ""));
      }).length;
      const e: EmailEval = {
        wellFormed: turns ? (turns - sum("malformed")) / turns : 0,
        fromQuestion: fromQuestion / episodes,
        turns: turns / episodes,
        accuracy: sum("correct") / episodes,
        rightMessage: sum("rightMessage") / episodes,
      };
      const line = `${(100 * e.wellFormed).toFixed(1)}% well-formed tool calls (${e.turns.toFixed(1)} turns an episode); first searches from the question ${e.fromQuestion.toFixed(2)}; right answers ${e.accuracy.toFixed(2)}, right emails ${e.rightMessage.toFixed(2)}`;
      return { rate: e.wellFormed, line, result: e };
    };
  }

  /** Legal-move rate and results of `games` games against the random opponent at temperature 1. */
  async evaluate(games: number, evalSeed: number): Promise<Eval> {
    this.engine.scheduler.invalidateCache();
    const client = this.client;
    const trajs = await Promise.all(
      Array.from({ length: games }, (_, i) =>
        rolloutTicTacToe(client, {
          model: "webart-tiny",
          scenario: { seed: evalSeed + i },
          temperature: 1,
          maxTokens: 12,
        }),
      ),
    );
    const s = summarizeTicTacToe(trajs);
    return { legal: s.legalMoves, win: s.win, draw: s.draw, invalid: s.invalid };
  }

  /** Writes the weights as f32 in HF names. */
  async save(): Promise<void> {
    const shapes = tensorShapes(this.engine.config);
    const data = await this.trainer.readWeights();
    const tensors = this.trainer.tensors.map((t, i) => ({
      name: t.name,
      dtype: "F32" as const,
      shape: shapes.get(t.name)!,
      data: data[i],
    }));
    writeFileSync(join(this.out, "model.safetensors"), writeSafetensors(tensors, { format: "pt" }));
  }

  /**
   * One phase: shuffled epochs of `convs`, AdamW with a warm-up (default 50 steps) and a cosine schedule over `minutes`, an
   * evaluation every 40 steps that saves the weights; it ends at an evaluation that reaches `target` or after
   * `minutes`. Each phase starts a fresh optimizer state and its own data order (seed + 2); `lrScale` scales --lr.
   */
  async phase<E>(
    name: string,
    convs: Transcript[],
    minutes: number,
    target: number,
    measure: Measure<E>,
    lrScale = 1,
  ): Promise<PhaseResult<E>> {
    const { log, o } = this;
    const data = convs.flatMap((c) => this.toSequences(c));
    log(
      `${name} phase: ${data.length} sequences, ${data.reduce((s, q) => s + q.ids.length, 0)} tokens, up to ${minutes.toFixed(1)} min`,
    );
    await this.trainer.resetOptimizer();
    const p0 = performance.now();
    const phaseMin = () => (performance.now() - p0) / 60000;
    const rng = new Rng(o.seed + 2);
    let step = 0;
    let order: number[] = [];
    for (;;) {
      if (!order.length) {
        order = data.map((_, i) => i);
        for (let i = order.length - 1; i > 0; i--) {
          const j = rng.int(i + 1);
          [order[i], order[j]] = [order[j], order[i]];
        }
      }
      const seqs = order.splice(0, o.batch).map((i) => data[i]);
      step++;
      const frac = Math.min(1, phaseMin() / minutes);
      const lr =
        lrScale * o.lr * Math.min(1, step / (o.warmup ?? 50)) * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * frac)));
      const r = await this.trainer.step_(seqs, { lr, ...SFT_ADAMW });
      if (step % 5 === 0)
        log(`${name} step ${step} loss ${r.loss.toFixed(4)} grad ${r.gradNorm.toFixed(3)} lr ${lr.toExponential(2)}`);
      const done = phaseMin() >= minutes;
      if (step % 40 === 0 || done) {
        const e = await measure(step);
        log(`${name} eval: ${e.line}`);
        await this.save();
        if (e.rate >= target || done)
          return { name, steps: step, minutes: Number(phaseMin().toFixed(1)), sequences: data.length, last: e.result };
      }
    }
  }

  close(): Promise<void> {
    return this.engine.close();
  }
}
