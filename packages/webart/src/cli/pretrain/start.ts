// Pretraining's first two steps, written into the model folder: game transcripts → a byte-level BPE tokenizer
// (tokenizer.json, tokenizer_config.json with the chat template), then a small Llama-form config and its starting
// weights (seeded random, or another run's model.safetensors with --init-from).
import { copyFileSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseConfig, randomWeights, type Message } from "@webart/engine";
import {
  SPECIAL_TOKENS,
  generateTranscripts,
  renderChat,
  tokenizerConfig,
  tokenizerJson,
  trainBpe,
  type BpeTokenizer,
} from "@webart/envs";

export interface StartOptions {
  out: string;
  seed: number;
  /** Tic-tac-toe games per phase (2048 gets one in 200). */
  games: number;
  /** The skills phase's player (see below) and both phases' share of reading-order moves. */
  skill: number;
  block: number;
  /** The board phase's chance to block (0: it never blocks, as the committed model's board phase). */
  boardBlock: number;
  ordered: number;
  /** A folder whose model.safetensors is the starting point (same tokenizer and config), or undefined. */
  initFrom?: string;
}

export interface Start {
  board: Message[][];
  skills: Message[][];
  g2048: Message[][];
  /** Vocabulary size (BPE ids and special tokens). */
  vocab: number;
}

export async function writeStart(o: StartOptions, log: (m: string) => void): Promise<Start> {
  // The transcripts' player (generateTranscripts): takes an immediate win with chance `skill` when it has one, else
  // blocks the opponent's immediate win with chance `block`, else plays the first empty cell in reading order with
  // chance `ordered`, else a uniformly random empty cell. Board phase: skill 0.5, block 0, ordered 1: each answer
  // is (nearly) a function of the board, which this model learns in ~240 steps (on uniformly random legal moves it
  // learns one distribution over the nine cells for every board, about 70% legal: models/README.md). Skills
  // phase: --skill and --block (0.25 each): the winning and blocking moves the RL step can then make more likely.
  const { out, seed, games, ordered } = o;
  const board = await generateTranscripts({ game: "tictactoe", games, seed, skill: 0.5, block: o.boardBlock, ordered });
  const skills = await generateTranscripts({ game: "tictactoe", games, seed, skill: o.skill, block: o.block, ordered });
  const g2048 = await generateTranscripts({ game: "2048", games: Math.ceil(games / 200), seed: seed + 1, skill: 0.5 });
  const bpe = trainBpe(
    [...board, ...g2048].map((m) => renderChat(m)),
    { vocabSize: 2000, specialTokens: SPECIAL_TOKENS },
  );
  const V = writeModelFiles(out, bpe, { seed, context: 1024, initFrom: o.initFrom });
  log(
    `${board.length} + ${skills.length} tic-tac-toe (board, skills) and ${g2048.length} 2048 conversations; tokenizer of ${V} ids`,
  );
  return { board, skills, g2048, vocab: V };
}

/**
 * The model folder's files from a trained BPE: tokenizer.json, tokenizer_config.json (ChatML with tools, the given
 * context), config.json (Llama form, ~0.43M parameters with tied embeddings: small enough to train on a CPU WebGPU),
 * generation_config.json and the starting weights (seeded random, or `initFrom`'s). Returns the vocabulary size.
 */
export function writeModelFiles(
  out: string,
  bpe: BpeTokenizer,
  o: { seed: number; context: number; initFrom?: string; compactTools?: boolean },
): number {
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "tokenizer.json"), JSON.stringify(tokenizerJson(bpe), null, 2) + "\n");
  writeFileSync(
    join(out, "tokenizer_config.json"),
    JSON.stringify(tokenizerConfig(bpe, { modelMaxLength: o.context, compactTools: o.compactTools }), null, 2) + "\n",
  );
  const V = bpe.vocab.size + bpe.specialTokens.length;

  const special = (t: string) => V - bpe.specialTokens.length + SPECIAL_TOKENS.indexOf(t);
  const eos = special("<|im_end|>");
  const config = {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    attention_bias: false,
    attention_dropout: 0.0,
    bos_token_id: special("<|endoftext|>"),
    eos_token_id: eos,
    head_dim: 32,
    hidden_act: "silu",
    hidden_size: 96,
    initializer_range: 0.02,
    intermediate_size: 256,
    max_position_embeddings: o.context,
    mlp_bias: false,
    num_attention_heads: 3,
    num_hidden_layers: 4,
    num_key_value_heads: 1,
    pretraining_tp: 1,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    rope_theta: 10000.0,
    tie_word_embeddings: true,
    torch_dtype: "float32",
    use_cache: true,
    vocab_size: V,
  };
  writeFileSync(join(out, "config.json"), JSON.stringify(config, null, 2) + "\n");
  writeFileSync(
    join(out, "generation_config.json"),
    JSON.stringify({ eos_token_id: [eos], bos_token_id: config.bos_token_id }, null, 2) + "\n",
  );
  const weights = join(out, "model.safetensors");
  if (o.initFrom === undefined) writeFileSync(weights, randomWeights(parseConfig(config), { seed: o.seed }));
  else {
    // Through a copy, so --init-from may name the --out folder itself.
    const tmp = `${weights}.init`;
    copyFileSync(join(o.initFrom, "model.safetensors"), tmp);
    writeFileSync(weights, readFileSync(tmp));
    unlinkSync(tmp);
  }
  return V;
}
