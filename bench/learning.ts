// `npm run bench -- learning`: does the default recipe make the embedded model better at tic-tac-toe, by how much,
// and how reliably? Trains one run per training seed with `webart train` (its defaults, plus any arguments after
// `--`), then evaluates each final checkpoint and the base model on every evaluation seed's games against the
// random opponent with `webart eval`. Prints each run's wall time and gains, then the mean gain, its spread and the
// worst case. The runs are sequential, each in its own process, so a run's wall time is its own.
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const webart = join(root, "packages/webart/bin/webart.js");

export interface LearningOptions {
  trainSeeds: number[];
  evalSeeds: number[];
  games: number;
  runs: string;
  /** Passed to every `webart train` after the bench's own --runs, --name and --seed. */
  trainArgs: string[];
}

interface EvalRow {
  player: string;
  games: number;
  win: number;
  draw: number;
  invalid: number;
}

/** Runs the CLI; its output goes to ours (training's progress) unless `capture`, when stdout is returned. */
function cli(args: string[], capture = false): string {
  const r = spawnSync(process.execPath, [webart, ...args], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", capture ? "pipe" : "inherit", "inherit"],
    maxBuffer: 1 << 26,
  });
  if (r.status !== 0) throw new Error(`bench learning: webart ${args.join(" ")} exited with ${r.status}`);
  return r.stdout ?? "";
}

function evaluate(opts: LearningOptions, seed: number, model: string[]): number {
  const out = cli(
    [
      "eval",
      "--games",
      String(opts.games),
      "--seed",
      String(seed),
      "--runs",
      opts.runs,
      "--no-baselines",
      "--json",
    ].concat(model),
    true,
  );
  const rows = JSON.parse(out.trim().split("\n").pop()!) as EvalRow[];
  if (rows.length !== 1) throw new Error(`bench learning: expected one eval row, got ${rows.length}`);
  return rows[0].win + rows[0].draw;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const std = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));
const pts = (x: number) => (100 * x).toFixed(1);
const signed = (x: number) => (x >= 0 ? "+" : "") + pts(x);

export async function learningBench(opts: LearningOptions): Promise<Record<string, unknown>> {
  console.log(
    `learning: train seeds ${opts.trainSeeds.join(", ")}; eval seeds ${opts.evalSeeds.join(", ")} x ${opts.games} games ` +
      `(win+draw against the random opponent); runs in ${opts.runs}; train args: ${opts.trainArgs.join(" ") || "(defaults)"}`,
  );
  const base = new Map<number, number>();
  // The base row plays the model the runs start from: train's --model when given (eval reads it from each run).
  const { model } = parseArgs({ args: opts.trainArgs, options: { model: { type: "string" } }, strict: false }).values;
  const baseModel = typeof model === "string" ? ["--model", model] : [];
  for (const e of opts.evalSeeds) base.set(e, evaluate(opts, e, ["--checkpoint", "none", ...baseModel]));
  const runs = [];
  for (const s of opts.trainSeeds) {
    const name = `learning-seed${s}`;
    const t0 = performance.now();
    cli(["train", "--runs", opts.runs, "--name", name, "--seed", String(s), ...opts.trainArgs]);
    const minutes = (performance.now() - t0) / 60_000;
    const evals = opts.evalSeeds.map((e) => {
      const after = evaluate(opts, e, ["--name", name, "--checkpoint", "latest", "--no-base"]);
      return { evalSeed: e, base: base.get(e)!, after, gain: after - base.get(e)! };
    });
    runs.push({ trainSeed: s, minutes, evals });
    console.log(
      `train seed ${s}: ${minutes.toFixed(1)} min; ` +
        evals.map((v) => `eval ${v.evalSeed}: ${pts(v.base)} -> ${pts(v.after)} (${signed(v.gain)})`).join("; "),
    );
  }
  const gains = runs.flatMap((r) => r.evals.map((v) => v.gain));
  const summary = {
    meanGain: mean(gains),
    stdGain: std(gains),
    worstGain: Math.min(...gains),
    bestGain: Math.max(...gains),
    maxMinutes: Math.max(...runs.map((r) => r.minutes)),
  };
  console.log(
    "\n| train seed | minutes | " + opts.evalSeeds.map((e) => `eval ${e}: base -> after (gain)`).join(" | ") + " |",
  );
  console.log("|---|---|" + opts.evalSeeds.map(() => "---").join("|") + "|");
  for (const r of runs)
    console.log(
      `| ${r.trainSeed} | ${r.minutes.toFixed(1)} | ` +
        r.evals.map((v) => `${pts(v.base)} -> ${pts(v.after)} (${signed(v.gain)})`).join(" | ") +
        " |",
    );
  console.log(
    `\nmean gain ${signed(summary.meanGain)} points (std ${pts(summary.stdGain)}, worst ${signed(summary.worstGain)}, best ` +
      `${signed(summary.bestGain)}) over ${gains.length} evaluations; longest run ${summary.maxMinutes.toFixed(1)} min`,
  );
  return { suite: "learning", options: opts, runs, summary, date: new Date().toISOString() };
}

/** `learning [--train-seeds 1,2] [--eval-seeds a,b,c] [--games N] [--runs DIR] [--quick] [-- train args]`. */
export function learningOptions(args: string[]): LearningOptions {
  const dash = args.indexOf("--");
  const own = dash < 0 ? args : args.slice(0, dash);
  const trainArgs = dash < 0 ? [] : args.slice(dash + 1);
  const get = (k: string) => {
    const i = own.indexOf(`--${k}`);
    return i < 0 ? undefined : own[i + 1];
  };
  const seeds = (k: string, d: string) =>
    (get(k) ?? d).split(",").map((x) => {
      if (!/^\d+$/.test(x)) throw new Error(`bench learning: --${k} ${JSON.stringify(x)} is not a list of seeds`);
      return Number(x);
    });
  const quick = own.includes("--quick");
  return {
    trainSeeds: seeds("train-seeds", quick ? "1" : "1,2"),
    // Drawn once for the final table and never used to choose settings (validation used 31337 and 27182).
    evalSeeds: seeds("eval-seeds", quick ? "5" : "602214,141421,173205"),
    games: Number(get("games") ?? (quick ? 8 : 400)),
    runs: get("runs") ?? mkdtempSync(join(tmpdir(), "webart-learning-")),
    trainArgs: quick ? ["--steps", "2", "--group-size", "2", "--groups-per-step", "2", ...trainArgs] : trainArgs,
  };
}
