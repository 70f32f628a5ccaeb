// Pretraining's third step: full-parameter supervised fine-tuning with the engine (f32 weights, every parameter
// trained) on the assistant tokens of the transcripts, in phases that end at a legal-move target or a time limit;
// the weights are written as f32 in HF names after every evaluation, so a stopped run leaves its latest model.
import { join } from "node:path";
import { writeFileSync } from "node:fs";
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
import { rolloutTicTacToe, summarizeTicTacToe } from "@webart/envs";
import { Rng } from "@webart/gpu";

export interface SftOptions {
  seed: number;
  /** Sequences per step, peak learning rate, games per evaluation. */
  batch: number;
  lr: number;
  evalGames: number;
  /** Weight of the non-assistant tokens (system prompt, boards) in the loss; 0: assistant tokens only. */
  contextWeight: number;
}

export interface Eval {
  legal: number;
  win: number;
  draw: number;
  invalid: number;
}

export interface PhaseResult {
  name: string;
  steps: number;
  minutes: number;
  sequences: number;
  last: Eval;
}

export class Sft {
  private readonly client: ReturnType<Engine["openaiClient"]>;

  private constructor(
    private readonly engine: Engine,
    readonly trainer: FullTrainer,
    private readonly out: string,
    private readonly o: SftOptions,
    private readonly log: (m: string) => void,
  ) {
    this.client = engine.openaiClient();
  }

  /** Loads the model folder `out` (written by writeStart) with f32 weights for training. */
  static async load(out: string, o: SftOptions, log: (m: string) => void): Promise<Sft> {
    const engine = await Engine.load(out, { weightsF32: true, kvSlots: 64, maxContext: 512, name: "webart-tiny" });
    return new Sft(engine, new FullTrainer(engine.model), out, o, log);
  }

  /** Assistant messages become "sampled" turns (their ids + <|im_end|>), so SFT sees exactly the RL layout. */
  private toSequences(conv: Message[]): SftSequence[] {
    const tok = this.engine.tokenizer;
    const imEnd = tok.inner.tokenToId("<|im_end|>")!;
    const mc = conv.map((m) => {
      if (m.role !== "assistant") return m;
      const ids = [...tok.encode(String(m.content)), imEnd];
      const c: SampledChoice = {
        index: 0,
        finish_reason: "stop",
        logprobs: null,
        message: { role: "assistant", content: String(m.content), refusal: null },
        token_ids: ids,
        token_logprobs: ids.map(() => 0),
      };
      return c;
    });
    // Assistant tokens weigh 1; every other token --context-weight. Tried at 0.1-0.25: the board tokens are
    // learned, but legality did not improve.
    const w = this.o.contextWeight;
    return tokenizeHistory(tok, { messagesAndChoices: mc }).map((t) => ({
      ids: t.ids,
      mask: Array.from(t.mask, (m) => (m ? 1 : w)),
    }));
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
   * One phase: shuffled epochs of `convs`, AdamW with a 50-step warm-up and a cosine schedule over `minutes`, an
   * evaluation every 40 steps that saves the weights; it ends at an evaluation that reaches `target` or after
   * `minutes`. Each phase starts a fresh optimizer state and its own data order (seed + 2).
   */
  async phase(name: string, convs: Message[][], minutes: number, target: number): Promise<PhaseResult> {
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
      const lr = o.lr * Math.min(1, step / 50) * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * frac)));
      const r = await this.trainer.step_(seqs, {
        lr,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weightDecay: 0.01,
        maxGradNorm: 1,
        microBatchTokens: 2048,
      });
      if (step % 5 === 0)
        log(`${name} step ${step} loss ${r.loss.toFixed(4)} grad ${r.gradNorm.toFixed(3)} lr ${lr.toExponential(2)}`);
      const done = phaseMin() >= minutes;
      if (step % 40 === 0 || done) {
        const e = await this.evaluate(o.evalGames, 1_000_000 + step);
        log(
          `${name} eval: ${(100 * e.legal).toFixed(1)}% legal moves; win ${e.win.toFixed(2)} draw ${e.draw.toFixed(2)} invalid games ${e.invalid.toFixed(2)}`,
        );
        await this.save();
        if (e.legal >= target || done)
          return { name, steps: step, minutes: Number(phaseMin().toFixed(1)), sequences: data.length, last: e };
      }
    }
  }

  close(): Promise<void> {
    return this.engine.close();
  }
}
