// Writes pretraining transcripts as JSONL, one conversation per line: {"messages": [...]} (the usual SFT
// format), or with --format text the conversations rendered through the embedded model's chat template.
//   npx tsx scripts/pretrain/transcripts.ts --game tictactoe --games 20000 --seed 1 --out ttt.jsonl
import { createWriteStream } from "node:fs";
import { generateTranscripts, renderChat } from "@webart/envs";
import { int, parseArgs } from "./args.ts";

const usage = `usage: transcripts.ts --game tictactoe|2048 --games N --out FILE [--seed S] [--skill P] [--winning-value W] [--format messages|text]`;
const a = parseArgs(usage, {
  game: "",
  games: "",
  out: "",
  seed: "1",
  skill: "0.5",
  "winning-value": "64",
  format: "messages",
});
if (a.game !== "tictactoe" && a.game !== "2048") throw new Error(`--game "${a.game}" is not a game (tictactoe, 2048)`);
if (a.format !== "messages" && a.format !== "text") throw new Error(`--format "${a.format}" must be messages or text`);

const t0 = performance.now();
const convs = await generateTranscripts({
  game: a.game,
  games: int("games", a.games),
  seed: int("seed", a.seed),
  skill: Number(a.skill),
  winningValue: int("winning-value", a["winning-value"]),
});
const out = createWriteStream(a.out);
for (const messages of convs)
  out.write(JSON.stringify(a.format === "text" ? { text: renderChat(messages) } : { messages }) + "\n");
await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
console.log(
  `${convs.length} conversations from ${a.games} ${a.game} games -> ${a.out} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
);
