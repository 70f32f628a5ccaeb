// `npm run pretrain`: makes the embedded default model from nothing, seeded and reproducible:
//  1. game transcripts (legal but unskilled play) → a byte-level BPE tokenizer (tokenizer.json, chat template);
//  2. a small Llama-form config and random weights;
//  3. full-parameter supervised fine-tuning with the engine on the assistant tokens of the transcripts, in two
//     phases: "board" (a player whose move is a function of the board, which this model learns to read) until
//     the legal-move target or --minutes, then "skills" (a player that also blocks and takes wins a quarter of
//     the time) until the target again or --skill-minutes; the weights are written as f32 after every evaluation.
//   npm run pretrain -- [--out models/webart-tiny] [--minutes 50] [--skill-minutes 20] [--seed 1]
import { copyFileSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Engine, FullTrainer, parseConfig, randomWeights, tensorShapes, tokenizeHistory, writeSafetensors, type Message, type SampledChoice, type SftSequence } from "@webart/engine";
import { SPECIAL_TOKENS, generateTranscripts, renderChat, tokenizerConfig, tokenizerJson, trainBpe, rolloutTicTacToe, summarizeTicTacToe } from "@webart/envs";
import { Rng } from "@webart/gpu";
import { int, parseArgs } from "./args.ts";

const usage =
  "usage: pretrain.ts [--out DIR] [--minutes 50] [--skill-minutes 20] [--total-minutes 58] [--seed S] [--games N] [--batch B] [--lr X]\n" +
  "                   [--eval-games N] [--target 0.95] [--init-from DIR] [--skill 0.25] [--block 0.25] [--ordered 1] [--context-weight 0]\n" +
  "  --minutes: the board phase's limit (it stops earlier at --target); --skill-minutes: the skills phase's (0 skips it),\n" +
  "  cut so both end within --total-minutes; --init-from DIR skips the board phase and starts the skills phase from\n" +
  "  DIR's model.safetensors (same tokenizer and config)";
const a = parseArgs(usage, {
  out: "models/webart-tiny", minutes: "50", "skill-minutes": "20", "total-minutes": "58", seed: "1", games: "6000", batch: "16", lr: "0.003",
  "eval-games": "100", target: "0.95", "init-from": "-", skill: "0.25", block: "0.25", ordered: "1", "context-weight": "0",
});
const seed = int("seed", a.seed);
const t0 = performance.now();
const elapsedMin = () => (performance.now() - t0) / 60000;
const log = (m: string) => console.log(`[pretrain ${elapsedMin().toFixed(1)}m] ${m}`);

// 1. Transcripts and tokenizer.
// The transcripts' player (generateTranscripts): takes an immediate win with chance `skill` when it has one, else
// blocks the opponent's immediate win with chance `block`, else plays the first empty cell in reading order with
// chance `ordered`, else a uniformly random empty cell. Board phase: skill 0.5, block 0, ordered 1: each answer
// is (nearly) a function of the board, which this model learns in ~240 steps (on uniformly random legal moves it
// learns one distribution over the nine cells for every board, about 70% legal: models/README.md). Skills
// phase: --skill and --block (0.25 each): the winning and blocking moves the RL step can then make more likely.
const games = int("games", a.games);
const ordered = Number(a.ordered);
const board = await generateTranscripts({ game: "tictactoe", games, seed, skill: 0.5, ordered });
const skills = await generateTranscripts({ game: "tictactoe", games, seed, skill: Number(a.skill), block: Number(a.block), ordered });
const g2048 = await generateTranscripts({ game: "2048", games: Math.ceil(games / 200), seed: seed + 1, skill: 0.5 });
const bpe = trainBpe([...board, ...g2048].map((m) => renderChat(m)), { vocabSize: 2000, specialTokens: SPECIAL_TOKENS });
mkdirSync(a.out, { recursive: true });
writeFileSync(join(a.out, "tokenizer.json"), JSON.stringify(tokenizerJson(bpe), null, 2) + "\n");
writeFileSync(join(a.out, "tokenizer_config.json"), JSON.stringify(tokenizerConfig(bpe, { modelMaxLength: 1024 }), null, 2) + "\n");
const V = bpe.vocab.size + bpe.specialTokens.length;
log(`${board.length} + ${skills.length} tic-tac-toe (board, skills) and ${g2048.length} 2048 conversations; tokenizer of ${V} ids`);

// 2. Config and random weights (Llama form, tied embeddings, ~0.43M parameters: small enough to train on a CPU WebGPU).
const eos = V - bpe.specialTokens.length + SPECIAL_TOKENS.indexOf("<|im_end|>");
const config = {
  architectures: ["LlamaForCausalLM"], model_type: "llama", attention_bias: false, attention_dropout: 0.0,
  bos_token_id: V - bpe.specialTokens.length + SPECIAL_TOKENS.indexOf("<|endoftext|>"), eos_token_id: eos,
  head_dim: 32, hidden_act: "silu", hidden_size: 96, initializer_range: 0.02, intermediate_size: 256,
  max_position_embeddings: 1024, mlp_bias: false, num_attention_heads: 3, num_hidden_layers: 4, num_key_value_heads: 1,
  pretraining_tp: 1, rms_norm_eps: 1e-5, rope_scaling: null, rope_theta: 10000.0, tie_word_embeddings: true,
  torch_dtype: "float32", use_cache: true, vocab_size: V,
};
writeFileSync(join(a.out, "config.json"), JSON.stringify(config, null, 2) + "\n");
writeFileSync(join(a.out, "generation_config.json"), JSON.stringify({ eos_token_id: [eos], bos_token_id: config.bos_token_id }, null, 2) + "\n");
if (a["init-from"] !== "-") copyFileSync(join(a["init-from"], "model.safetensors"), join(a.out, "model.safetensors.init"));
writeFileSync(
  join(a.out, "model.safetensors"),
  a["init-from"] !== "-" ? readFileSync(join(a.out, "model.safetensors.init")) : randomWeights(parseConfig(config), { seed }),
);
if (a["init-from"] !== "-") unlinkSync(join(a.out, "model.safetensors.init"));

// 3. SFT with the engine (f32 weights, every parameter trained).
const engine = await Engine.load(a.out, { weightsF32: true, kvSlots: 64, maxContext: 512, name: "webart-tiny" });
const tok = engine.tokenizer;
const imEnd = tok.inner.tokenToId("<|im_end|>")!;
const contextWeight = Number(a["context-weight"]);
if (!(contextWeight >= 0 && contextWeight <= 1)) throw new Error(`--context-weight ${a["context-weight"]}: expected a number in [0, 1]`);
/** Assistant messages become "sampled" turns (their ids + <|im_end|>), so SFT sees exactly the RL layout. */
function toSequences(conv: Message[]): SftSequence[] {
  const mc = conv.map((m) => {
    if (m.role !== "assistant") return m;
    const ids = [...tok.encode(String(m.content)), imEnd];
    const c: SampledChoice = { index: 0, finish_reason: "stop", logprobs: null, message: { role: "assistant", content: String(m.content), refusal: null }, token_ids: ids, token_logprobs: ids.map(() => 0) };
    return c;
  });
  // Assistant tokens weigh 1; every other token (system prompt, boards) --context-weight (default 0: SFT on the
  // assistant tokens only). Tried at 0.1-0.25: the board tokens are learned, but legality did not improve.
  return tokenizeHistory(tok, { messagesAndChoices: mc }).map((t) => ({ ids: t.ids, mask: Array.from(t.mask, (m) => (m ? 1 : contextWeight)) }));
}
const trainer = new FullTrainer(engine.model);
const client = engine.openaiClient();

async function legalRate(games: number, evalSeed: number): Promise<{ legal: number; win: number; draw: number; invalid: number }> {
  engine.scheduler.invalidateCache();
  const trajs = await Promise.all(
    Array.from({ length: games }, (_, i) => rolloutTicTacToe(client, { model: "webart-tiny", scenario: { seed: evalSeed + i }, temperature: 1, maxTokens: 12 })),
  );
  const s = summarizeTicTacToe(trajs);
  return { legal: s.legalMoves, win: s.win, draw: s.draw, invalid: s.invalid };
}

/** Writes the weights as f32 in HF names (after every evaluation, so a stopped run leaves its latest model). */
async function save(): Promise<void> {
  const shapes = tensorShapes(engine.config);
  const data = await trainer.readWeights();
  const tensors = trainer.tensors.map((t, i) => ({ name: t.name, dtype: "F32" as const, shape: shapes.get(t.name)!, data: data[i] }));
  writeFileSync(join(a.out, "model.safetensors"), writeSafetensors(tensors, { format: "pt" }));
}

type Eval = Awaited<ReturnType<typeof legalRate>>;
interface PhaseResult { name: string; steps: number; minutes: number; sequences: number; last: Eval }

/**
 * One phase of SFT: shuffled epochs of `convs`, AdamW with a 50-step warm-up and a cosine schedule over `minutes`,
 * an evaluation (100 games) every 40 steps that saves the weights; it ends at an evaluation that reaches `target`
 * or after `minutes`. Each phase starts a fresh optimizer state and its own data order (seed + 2).
 */
async function phase(name: string, convs: Message[][], minutes: number, target: number): Promise<PhaseResult> {
  const data = convs.flatMap(toSequences);
  log(`${name} phase: ${data.length} sequences, ${data.reduce((s, q) => s + q.ids.length, 0)} tokens, up to ${minutes.toFixed(1)} min`);
  await trainer.resetOptimizer();
  const p0 = performance.now();
  const phaseMin = () => (performance.now() - p0) / 60000;
  const rng = new Rng(seed + 2);
  const batch = int("batch", a.batch);
  const lr0 = Number(a.lr);
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
    const seqs = order.splice(0, batch).map((i) => data[i]);
    step++;
    const frac = Math.min(1, phaseMin() / minutes);
    const lr = lr0 * Math.min(1, step / 50) * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * frac)));
    const r = await trainer.step_(seqs, { lr, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1, microBatchTokens: 2048 });
    if (step % 5 === 0) log(`${name} step ${step} loss ${r.loss.toFixed(4)} grad ${r.gradNorm.toFixed(3)} lr ${lr.toExponential(2)}`);
    const done = phaseMin() >= minutes;
    if (step % 40 === 0 || done) {
      const e = await legalRate(int("eval-games", a["eval-games"]), 1_000_000 + step);
      log(`${name} eval: ${(100 * e.legal).toFixed(1)}% legal moves; win ${e.win.toFixed(2)} draw ${e.draw.toFixed(2)} invalid games ${e.invalid.toFixed(2)}`);
      await save();
      if (e.legal >= target || done) return { name, steps: step, minutes: Number(phaseMin().toFixed(1)), sequences: data.length, last: e };
    }
  }
}

const target = Number(a.target);
const phases: PhaseResult[] = [];
if (a["init-from"] === "-") phases.push(await phase("board", [...board, ...g2048], Number(a.minutes), target));
const skillMinutes = Math.min(Number(a["skill-minutes"]), Number(a["total-minutes"]) - elapsedMin());
// The skills phase also ends at the target: by then (80 steps for seed 1) it blocks ~24% of threats and takes ~2/3 of wins.
if (skillMinutes > 0) phases.push(await phase("skills", [...skills, ...g2048], skillMinutes, target));

// Each phase ends right after an evaluation, which saved the weights.
const final = await legalRate(400, 7_000_000);
const report = {
  seed, minutes: Number(elapsedMin().toFixed(1)), vocab: V, parameters: trainer.tensors.reduce((s, t) => s + t.n, 0),
  init_from: a["init-from"] === "-" ? null : a["init-from"], phases, eval_400_games: final,
};
writeFileSync(join(a.out, "pretrain.json"), JSON.stringify(report, null, 2) + "\n");
log(`done: ${JSON.stringify(report)}`);
process.exit(0);
