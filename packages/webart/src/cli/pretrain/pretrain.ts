// `webart pretrain`: makes the embedded model ("webart-tiny") from nothing, seeded and reproducible:
//  1. game transcripts (legal but unskilled play) → a byte-level BPE tokenizer (start.ts);
//  2. a small Llama-form config and random weights (start.ts);
//  3. full-parameter SFT on the assistant tokens, in two phases (sft.ts): "board" (a player whose move is a function
//     of the board, which this model learns to read) until the legal-move target or --minutes, then "skills" (a
//     player that also blocks and takes wins a quarter of the time) until the target again or --skill-minutes;
//     with --skilled-minutes, a phase between them on a player that always takes its wins and blocks;
//     with --trainer torch, each phase runs in PyTorch (torch.ts) and the engine measures the result.
// The repo's `npm run pretrain` runs it with --out models/webart-tiny (scripts/pretrain/main.mjs).
import { existsSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { num, parseOptions, UsageError, type CommandSpec } from "../args.ts";
import type { Message } from "@webart/engine";
import { generateTranscripts } from "@webart/envs";
import { pretrainEmail } from "./email.ts";
import { Sft, type PhaseResult } from "./sft.ts";
import { writeStart } from "./start.ts";

export const PRETRAIN = {
  name: "pretrain",
  about:
    "Makes the embedded model (webart-tiny) from nothing, seeded: game transcripts -> a BPE tokenizer -> full-parameter\n" +
    "SFT with the engine in two phases, board reading (--minutes) then skills (--skill-minutes); the weights are saved\n" +
    "at every evaluation. --out must be a new or empty folder unless --force is given (then its model files are\n" +
    "replaced). Load the result with --model DIR in train, eval and serve.",
  options: {
    out: { arg: "DIR", default: "./webart-tiny", help: "the model folder to write (HF layout)" },
    force: { flag: true, help: "write into --out even if it already holds files (its model files are replaced)" },
    minutes: { arg: "M", default: "50", help: "the board phase's limit (it stops earlier at --target)" },
    "skilled-minutes": {
      arg: "M",
      default: "0",
      help: "a phase before skills (0 skips it) on a player that always takes its wins and blocks: a deterministic\ntarget, from which the model learns to read threats; the skills phase then runs at half --lr",
    },
    "skill-minutes": { arg: "M", default: "20", help: "the skills phase's limit (0 skips it)" },
    "total-minutes": { arg: "M", default: "58", help: "the skills phase is cut so that both end within this" },
    seed: { arg: "N", default: "1", help: "seed of the transcripts, the tokenizer, the weights and the data order" },
    games: { arg: "N", default: "6000", help: "tic-tac-toe games per phase (and one 2048 game per 200)" },
    batch: { arg: "N", default: "16", help: "sequences per step" },
    lr: { arg: "X", default: "0.003", help: "peak learning rate (AdamW; 50-step warm-up, cosine over the phase)" },
    "eval-games": { arg: "N", default: "100", help: "games per evaluation (every 40 steps and at a phase's end)" },
    target: { arg: "P", default: "0.95", help: "a phase ends at an evaluation with this legal-move rate" },
    "init-from": {
      arg: "DIR",
      help: "start from DIR's model.safetensors (same tokenizer and config: the same --seed and --games, or for\nemail --episodes and --perfect); tic-tac-toe skips the board phase",
    },
    skill: { arg: "P", default: "0.25", help: "skills phase: chance that the player takes a win it has" },
    block: { arg: "P", default: "0.25", help: "skills phase: chance that the player blocks the opponent's win" },
    "board-block": {
      arg: "P",
      default: "0",
      help: "board phase: chance that the player blocks the opponent's win (the board phase takes wins half the time)",
    },
    ordered: { arg: "P", default: "1", help: "chance of a move in reading order (else a random empty cell)" },
    "context-weight": {
      arg: "P",
      default: "0",
      help: "loss weight of the non-assistant tokens (0: assistant tokens only)",
    },
    task: {
      arg: "NAME",
      default: "tictactoe",
      help: "tictactoe (the embedded model), or email: a model for the email agent, pretrained on tool-call\ntranscripts of scripted searchers until --target well-formed calls or --minutes (--games, --skill and the\nskills phase are tic-tac-toe's)",
    },
    episodes: { arg: "N", default: "2000", help: "email: training episodes to pretrain on" },
    "first-minutes": {
      arg: "M",
      default: "10",
      help: "email: the first-call phase's limit (the first tool call alone, before whole episodes for --minutes)",
    },
    perfect: {
      arg: "P",
      default: "0",
      help: "email: share of the episodes played by the perfect searcher (the rest by the naive one)",
    },
    trainer: {
      arg: "NAME",
      default: "engine",
      help: "engine (the WebGPU trainer), or torch: the same phases and recipe in PyTorch on the CPU (python3 with\ntorch; ~50x faster on 2 CPU cores), each phase then measured once by the engine; --target is not used",
    },
    "split-digits": {
      flag: true,
      help: "email: a tokenizer with every digit a token of its own (message ids copy digit by digit)",
    },
  },
} satisfies CommandSpec;

/** --out must be new or empty, or --force: a model folder is never overwritten by accident. */
function checkOut(out: string, force: boolean): void {
  if (!existsSync(out)) return;
  if (!statSync(out).isDirectory()) throw new UsageError(`--out ${out}: a file is in the way (not a folder)`);
  const files = readdirSync(out);
  if (files.length && !force) {
    const some = files.slice(0, 4).join(", ") + (files.length > 4 ? ", ..." : "");
    throw new UsageError(
      `--out ${out} already holds files (${some}): pass --force to replace its model files, or pick another --out`,
    );
  }
}

export async function pretrainCommand(argv: string[]): Promise<number> {
  const a = parseOptions(PRETRAIN, argv);
  const p = (k: "skill" | "block" | "board-block" | "ordered" | "target" | "context-weight" | "perfect") =>
    num(k, a[k], { min: 0, max: 1 });
  const o = {
    out: a.out,
    seed: num("seed", a.seed, { int: true, min: 0 }),
    games: num("games", a.games, { int: true, min: 1 }),
    batch: num("batch", a.batch, { int: true, min: 1 }),
    lr: num("lr", a.lr, { min: 0 }),
    evalGames: num("eval-games", a["eval-games"], { int: true, min: 1 }),
    minutes: num("minutes", a.minutes, { min: 0 }),
    skillMinutes: num("skill-minutes", a["skill-minutes"], { min: 0 }),
    skilledMinutes: num("skilled-minutes", a["skilled-minutes"], { min: 0 }),
    totalMinutes: num("total-minutes", a["total-minutes"], { min: 0 }),
    target: p("target"),
    skill: p("skill"),
    block: p("block"),
    boardBlock: p("board-block"),
    ordered: p("ordered"),
    contextWeight: p("context-weight"),
    initFrom: a["init-from"],
  };
  if (o.initFrom !== undefined && !existsSync(join(o.initFrom, "model.safetensors")))
    throw new UsageError(`--init-from ${o.initFrom}: no model.safetensors there`);
  checkOut(o.out, a.force);
  if (a.task !== "tictactoe" && a.task !== "email")
    throw new UsageError(`--task ${JSON.stringify(a.task)} is not known (tictactoe, email)`);
  if (a.trainer !== "engine" && a.trainer !== "torch")
    throw new UsageError(`--trainer ${JSON.stringify(a.trainer)} is not known (engine, torch)`);
  const torch = a.trainer === "torch";

  const t0 = performance.now();
  const elapsedMin = () => (performance.now() - t0) / 60000;
  const log = (m: string) => console.log(`[pretrain ${elapsedMin().toFixed(1)}m] ${m}`);
  if (a.task === "email") {
    const episodes = num("episodes", a.episodes, { int: true, min: 1 });
    const firstMinutes = num("first-minutes", a["first-minutes"], { min: 0 });
    const e = { ...o, perfect: p("perfect"), firstMinutes, torch, splitDigits: a["split-digits"] };
    return pretrainEmail(e, episodes, log, elapsedMin);
  }
  const start = await writeStart(o, log);
  const sft = await Sft.load(o.out, o, log);
  const phases: PhaseResult[] = [];
  const chats = (cs: Message[][]) => cs.map((messages) => ({ messages }));
  const measure = sft.ticTacToe(o.evalGames);
  // --trainer torch: each phase in PyTorch, with 300 games of other seeds held out for its validation loss.
  const held = async (skill: number, block: number) =>
    chats(
      await generateTranscripts({
        game: "tictactoe",
        games: 300,
        seed: o.seed + 1000,
        skill,
        block,
        ordered: o.ordered,
      }),
    );
  const phase = async (name: string, convs: Message[][], minutes: number, skill: number, block: number, lr = 1) =>
    torch
      ? sft.torchPhase(name, chats(convs), await held(skill, block), minutes, measure, lr)
      : sft.phase(name, chats(convs), minutes, o.target, measure, lr);
  if (o.initFrom === undefined)
    phases.push(await phase("board", [...start.board, ...start.g2048], o.minutes, 0.5, o.boardBlock));
  if (o.skilledMinutes > 0) {
    // Every win taken and every threat blocked: the answer is again a function of the board (models/README.md).
    const skilled = await generateTranscripts({
      game: "tictactoe",
      games: o.games,
      seed: o.seed + 7,
      skill: 1,
      block: 1,
      ordered: o.ordered,
    });
    phases.push(await phase("skilled", [...skilled, ...start.g2048], o.skilledMinutes, 1, 1));
  }
  const skillMinutes = Math.min(o.skillMinutes, o.totalMinutes - elapsedMin());
  // The skills phase also ends at the target (80 steps for seed 1 from the committed board model).
  const skillsLr = o.skilledMinutes > 0 ? 0.5 : 1;
  if (skillMinutes > 0)
    phases.push(await phase("skills", [...start.skills, ...start.g2048], skillMinutes, o.skill, o.block, skillsLr));

  // Each phase ends right after an evaluation, which saved the weights.
  const final = await sft.evaluate(400, 7_000_000);
  const report = {
    seed: o.seed,
    minutes: Number(elapsedMin().toFixed(1)),
    vocab: start.vocab,
    parameters: sft.trainer.tensors.reduce((s, t) => s + t.n, 0),
    init_from: o.initFrom ?? null,
    trainer: a.trainer,
    players: {
      board: { skill: 0.5, block: o.boardBlock },
      ...(o.skilledMinutes > 0 ? { skilled: { skill: 1, block: 1 } } : {}),
      skills: { skill: o.skill, block: o.block },
      ordered: o.ordered,
    },
    phases,
    eval_400_games: final,
  };
  writeFileSync(join(o.out, "pretrain.json"), JSON.stringify(report, null, 2) + "\n");
  await sft.close();
  log(`done: ${JSON.stringify(report)}`);
  return 0;
}
