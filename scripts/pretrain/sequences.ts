// Pretraining sequences exactly as the engine trains them (each transcript through the model folder's chat template:
// token ids, and 1 on the assistant tokens), written as one binary file for packages/webart/python/torch_sft.py; how
// webart-tiny's skilled and skills phases were made (models/README.md). `webart pretrain --trainer torch` does the
// same in one command.
//   R="node --import tsx --import ./scripts/wgsl-loader.mjs --conditions webart-source"
//   $R scripts/pretrain/sequences.ts MODEL_DIR OUT.bin tictactoe GAMES SEED SKILL BLOCK [ORDERED]
//   (ORDERED: chance that a move the player does not take for a win or a block is the first empty cell in reading
//   order, else a random empty cell; default 1)
//   $R scripts/pretrain/sequences.ts MODEL_DIR OUT.bin email EPISODES SEED PERFECT [first|all] [START] [SLIP] [nosender]
//   (SLIP: share of the perfect searcher's episodes that open with a search that finds nothing; default 0;
//   nosender: the perfect searcher searches with the question's keywords alone, never naming the sender)
import { emailTranscripts, generateTranscripts } from "@webart/envs";
import { Sft, type Transcript } from "../../packages/webart/src/cli/pretrain/sft.ts";
import { writeSequences } from "../../packages/webart/src/cli/pretrain/torch.ts";

const [dir, out, task, n = "2000", seed = "1", a = "0", b = "all", start = "0", slip = "0", sender = ""] =
  process.argv.slice(2);
if (!dir || !out || (task !== "email" && task !== "tictactoe"))
  throw new Error("usage: sequences.ts MODEL_DIR OUT.bin email|tictactoe N SEED ... (see the file's head)");
const email = task === "email";
const sft = await Sft.load(dir, { seed: Number(seed), batch: 4, lr: 0, evalGames: 0, contextWeight: 0 }, () => {}, {
  name: "pretrain",
  maxContext: email ? 2048 : 512,
});
let transcripts: Transcript[];
if (email) {
  const ts = await emailTranscripts({
    episodes: Number(n),
    seed: Number(seed),
    perfect: Number(a),
    start: Number(start),
    slip: Number(slip),
    sender: sender !== "nosender",
  });
  transcripts = ts.map((t) => (b === "first" ? { ...t, messages: t.messages.slice(0, 3) } : t));
} else {
  const o = { seed: Number(seed), skill: Number(a), block: Number(b) };
  // The last argument is ORDERED for tic-tac-toe (START for email).
  const ordered = process.argv.length > 9 ? Number(start) : 1;
  const games = await generateTranscripts({ game: "tictactoe", games: Number(n), ...o, ordered });
  // The 2048 conversations the pretraining phases mix in (start.ts), so the 2048 format is kept.
  const g2048 = await generateTranscripts({
    game: "2048",
    games: Math.ceil(Number(n) / 200),
    seed: o.seed + 1,
    skill: 0.5,
  });
  transcripts = [...games, ...g2048].map((messages) => ({ messages }));
}
const seqs = transcripts.flatMap((t) => sft.toSequences(t));
await sft.close();
writeSequences(out, seqs);
console.log(`${seqs.length} sequences, ${seqs.reduce((s, q) => s + q.ids.length, 0)} tokens -> ${out}`);
