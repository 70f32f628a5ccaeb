// How many tokens the email task takes under a tokenizer, to size a model that can start on it (models/README.md):
// the first turn (system prompt, the three tools, the question) and whole episodes of the scripted searchers, under
// webart-tiny's tokenizer and under byte-level BPEs trained on tool transcripts (held-out episodes are counted).
// Run: node --import tsx --conditions webart-source scripts/pretrain/email-tokens.ts [vocab sizes...]
// With COMPACT=1 the tools are rendered as webart-tools' template writes them (one signature line each).
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";
import {
  emailTranscripts,
  encodeBpe,
  generateTranscripts,
  renderChat,
  SPECIAL_TOKENS,
  trainBpe,
  type Message,
} from "@webart/envs";

const sizes = process.argv.slice(2).map(Number);
const train = await emailTranscripts({ episodes: 400, perfect: 0.5, seed: 1 });
const held = await emailTranscripts({ episodes: 100, start: 100_000, perfect: 0.5, seed: 2 });
const games = await generateTranscripts({ game: "tictactoe", games: 2000, seed: 1, skill: 0.5, ordered: 1 });
const compactTools = process.env.COMPACT === "1";
const firstTurn = (t: (typeof held)[number]) =>
  renderChat(t.messages.slice(0, 2), { tools: t.tools, addGenerationPrompt: true, compactTools });
const whole = (t: (typeof held)[number]) => renderChat(t.messages, { tools: t.tools, compactTools });
const stats = (count: (s: string) => number) => {
  const first = held.map((t) => count(firstTurn(t)));
  const all = held.map((t) => count(whole(t)));
  const mean = (a: number[]) => Math.round(a.reduce((x, y) => x + y, 0) / a.length);
  return `first turn ${mean(first)} tokens (max ${Math.max(...first)}), episode ${mean(all)} (max ${Math.max(...all)})`;
};

const dir = new URL("../../models/webart-tiny/", import.meta.url);
const tiny = new Tokenizer(
  JSON.parse(readFileSync(new URL("tokenizer.json", dir), "utf8")),
  JSON.parse(readFileSync(new URL("tokenizer_config.json", dir), "utf8")),
);
console.log(`webart-tiny (406 ids): ${stats((s) => tiny.encode(s).ids.length)}`);
for (const vocabSize of sizes.length ? sizes : [1024, 2048, 4096]) {
  const t0 = Date.now();
  const texts = [...train.map(whole), ...games.map((m: Message[]) => renderChat(m))];
  const bpe = trainBpe(texts, { vocabSize, specialTokens: SPECIAL_TOKENS });
  const ids = bpe.vocab.size + bpe.specialTokens.length;
  console.log(`BPE ${ids} ids (${(Date.now() - t0) / 1000} s): ${stats((s) => encodeBpe(bpe, s).length)}`);
}
