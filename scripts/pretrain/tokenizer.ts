// Trains the embedded model's byte-level BPE on tic-tac-toe and 2048 transcripts rendered with its chat
// template, and writes tokenizer.json + tokenizer_config.json (Hugging Face layout) into --out.
//   npx tsx scripts/pretrain/tokenizer.ts --out /tmp/tiny-tokenizer
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  SPECIAL_TOKENS,
  generateTranscripts,
  renderChat,
  tokenizerConfig,
  tokenizerJson,
  trainBpe,
} from "@webart/envs";
import { int, parseArgs } from "./args.ts";

const usage = `usage: tokenizer.ts --out DIR [--tictactoe-games N] [--2048-games N] [--seed S] [--vocab-size V] [--model-max-length L]`;
const a = parseArgs(usage, {
  out: "",
  "tictactoe-games": "4000",
  "2048-games": "100",
  seed: "1",
  "vocab-size": "2000",
  "model-max-length": "2048",
});

const t0 = performance.now();
const seed = int("seed", a.seed);
const convs = [
  ...(await generateTranscripts({ game: "tictactoe", games: int("tictactoe-games", a["tictactoe-games"]), seed })),
  ...(await generateTranscripts({ game: "2048", games: int("2048-games", a["2048-games"]), seed: seed + 1 })),
];
const texts = convs.map((m) => renderChat(m));
const t1 = performance.now();
const bpe = trainBpe(texts, { vocabSize: int("vocab-size", a["vocab-size"]), specialTokens: SPECIAL_TOKENS });
const t2 = performance.now();

mkdirSync(a.out, { recursive: true });
writeFileSync(join(a.out, "tokenizer.json"), JSON.stringify(tokenizerJson(bpe), null, 2) + "\n");
const config = tokenizerConfig(bpe, { modelMaxLength: int("model-max-length", a["model-max-length"]) });
writeFileSync(join(a.out, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
const mb = texts.reduce((s, t) => s + t.length, 0) / 1e6;
console.log(
  `${convs.length} conversations (${mb.toFixed(2)} MB) in ${((t1 - t0) / 1000).toFixed(1)} s; ` +
    `BPE ${bpe.vocab.size + bpe.specialTokens.length} ids (${bpe.merges.length} merges) in ${((t2 - t1) / 1000).toFixed(1)} s -> ${a.out}`,
);
