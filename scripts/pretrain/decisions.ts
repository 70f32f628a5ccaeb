// How sure is the agent at its decisions? Plays games from the empty board against the random opponent (as `webart
// eval`), and at every position where the agent has a win to take or a threat to block, samples K more replies at
// temperature 1 and counts how many take the right cell. Prints, for wins and for blocks, the mean probability of the
// right move and how the positions spread over it: a policy that is sure and wrong (probability 0 of K) gives GRPO no
// sample to learn from at that position, one that hesitates does. models/README.md has the figures.
//
//   node --import tsx --import ./scripts/wgsl-loader.mjs --conditions webart-source scripts/pretrain/decisions.ts \
//     [RUNS NAME STEP] [--games 200] [--samples 16]        (no run: the base model, models/webart-tiny)
import { parseArgs } from "node:util";
import { Engine, FsStore, LoraState, readAdapterConfig, RunFiles, stepDir } from "@webart/engine";
import {
  completingCell,
  newTicTacToe,
  other,
  parseTicTacToeMove,
  playEpisode,
  ticTacToeEnv,
  turnSeed,
  type Message,
} from "@webart/envs";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { games: { type: "string", default: "200" }, samples: { type: "string", default: "16" } },
});
const games = Number(values.games);
const K = Number(values.samples);
if (![0, 3].includes(positionals.length) || !(games >= 1) || !(K >= 1))
  throw new Error("usage: decisions.ts [RUNS NAME STEP] [--games N] [--samples K]");
const [runs, name, step] = positionals;

const engine = await Engine.load("models/webart-tiny", { name: "d", kvSlots: 64, maxContext: 512 });
if (name) {
  const files = new RunFiles(await FsStore.open(runs), "tictactoe", name);
  const ck = await files.readCheckpoint(Number(step));
  const where = `${files.path(`checkpoints/${stepDir(Number(step))}`)}/adapter_config.json`;
  const state = new LoraState(engine.gpu, engine.config, readAdapterConfig(ck.adapterConfig, where));
  await state.load(ck.adapter);
  engine.model.lora = state;
  engine.scheduler.invalidateCache();
}
const client = engine.openaiClient();
const ask = async (messages: Message[], seed: number) =>
  (await client.chat.completions.create({ model: "d", messages, temperature: 1, max_completion_tokens: 12, seed }))
    .choices[0].message.content ?? "";

const found: { kind: "win" | "block"; p: number }[] = [];
for (let g0 = 0; g0 < games; g0 += 16) {
  await Promise.all(
    Array.from({ length: Math.min(16, games - g0) }, async (_, k) => {
      const seed = 555000 + g0 + k;
      const game = newTicTacToe({ seed });
      let turn = 0;
      await playEpisode(ticTacToeEnv, game, async (_g, prompt) => {
        const win = completingCell(game.board, game.agent);
        const target = win >= 0 ? win : completingCell(game.board, other(game.agent));
        if (target >= 0) {
          const replies = await Promise.all(
            Array.from({ length: K }, (_, j) => ask(prompt, turnSeed(seed, 1000 * (turn + 1) + j))),
          );
          const right = replies.filter((r) => parseTicTacToeMove(r) === target).length;
          found.push({ kind: win >= 0 ? "win" : "block", p: right / K });
        }
        return { text: await ask(prompt, turnSeed(seed, turn++)) };
      });
    }),
  );
}
const label = name ? `${name} step ${step}` : "base model";
for (const kind of ["win", "block"] as const) {
  const r = found.filter((x) => x.kind === kind);
  const bins = [0, 0, 0, 0, 0];
  for (const { p } of r) bins[p === 0 ? 0 : p < 0.25 ? 1 : p < 0.75 ? 2 : p < 1 ? 3 : 4]++;
  const mean = r.reduce((s, x) => s + x.p, 0) / Math.max(1, r.length);
  console.log(
    `${label}, ${kind === "win" ? "wins to take" : "threats to block"}: ${r.length} positions, mean p(right) ${mean.toFixed(3)}; ` +
      `positions with p = 0: ${bins[0]}, (0, 0.25): ${bins[1]}, [0.25, 0.75): ${bins[2]}, [0.75, 1): ${bins[3]}, 1: ${bins[4]}`,
  );
}
await engine.close();
