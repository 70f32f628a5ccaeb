// Writes pretraining transcripts as JSONL, one conversation per line: {"messages": [...]} (the usual SFT
// format), or with --format text the conversations rendered through the embedded model's chat template.
// Uses the built @webart/envs (node scripts/build.mjs).
//   node scripts/pretrain/transcripts.mjs --game tictactoe --games 20000 --seed 1 --out ttt.jsonl
import { createWriteStream } from "node:fs";
import { parseArgs } from "node:util";
import { generateTranscripts, renderChat } from "@webart/envs";

const usage = `usage: transcripts.mjs --game tictactoe|2048 --games N --out FILE [--seed S] [--skill P] [--winning-value W] [--format messages|text]`;
const fail = (m) => {
  console.error(`${m}\n${usage}`);
  process.exit(2);
};
let a;
try {
  a = parseArgs({
    options: {
      game: { type: "string" },
      games: { type: "string" },
      out: { type: "string" },
      seed: { type: "string", default: "1" },
      skill: { type: "string", default: "0.5" },
      "winning-value": { type: "string", default: "64" },
      format: { type: "string", default: "messages" },
    },
    strict: true,
  }).values;
} catch (e) {
  fail(e.message);
}
for (const k of ["game", "games", "out"]) if (!a[k]) fail(`--${k} is required`);
const int = (k) => {
  const n = Number(a[k]);
  if (!Number.isInteger(n) || n < 0) fail(`--${k} ${JSON.stringify(a[k])}: expected a non-negative integer`);
  return n;
};
if (a.game !== "tictactoe" && a.game !== "2048") fail(`--game "${a.game}": expected tictactoe or 2048`);
if (a.format !== "messages" && a.format !== "text") fail(`--format "${a.format}": expected messages or text`);

const t0 = performance.now();
const convs = await generateTranscripts({
  game: a.game,
  games: int("games"),
  seed: int("seed"),
  skill: Number(a.skill),
  winningValue: int("winning-value"),
});
const out = createWriteStream(a.out);
for (const messages of convs)
  out.write(JSON.stringify(a.format === "text" ? { text: renderChat(messages) } : { messages }) + "\n");
await new Promise((resolve, reject) => out.end((e) => (e ? reject(e) : resolve())));
console.log(
  `${convs.length} conversations from ${a.games} ${a.game} games -> ${a.out} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
);
