// The `webart` command as users run it (the built bin, from the repo root): the command list, --version, each
// command's --help naming every option of its spec, and usage errors (exit 2, usage on stderr) that name the
// option and its value. Also parseOptions in-process: defaults, flags, --name=value.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseOptions, usage, type CommandSpec } from "./args.ts";
import { EXPORT } from "./export.ts";
import { INFO } from "./info.ts";
import { PRETRAIN } from "./pretrain/pretrain.ts";
import { SERVE } from "./serve/cli.ts";
import { SFT } from "./sft.ts";
import { EVAL } from "./train/eval.ts";
import { TRAIN } from "./train/train.ts";

const ROOT = join(import.meta.dirname, "../../../..");
const SPECS: CommandSpec[] = [TRAIN, SFT, EVAL, SERVE, EXPORT, INFO, PRETRAIN];

/** Runs the built bin; resolves with its exit code and output (never rejects). */
function webart(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["packages/webart/bin/webart.js", ...args],
      { cwd: ROOT, timeout: 60_000, env: { ...process.env, ...env } },
      (e, out, err) => resolve({ code: e ? Number(e.code ?? 1) : 0, out, err }),
    );
  });
}

describe("webart", () => {
  it("--help lists the seven commands; --version prints the package's version; an unknown command exits 2", async () => {
    const [help, version, bad] = await Promise.all([webart(["--help"]), webart(["--version"]), webart(["tain"])]);
    expect(help.code).toBe(0);
    for (const c of ["train", "sft", "eval", "serve", "export", "info", "pretrain"])
      expect(help.out).toMatch(new RegExp(`^  ${c} `, "m"));
    const pkg = JSON.parse(readFileSync(join(ROOT, "packages/webart/package.json"), "utf8")) as { version: string };
    expect([version.code, version.out.trim()]).toEqual([0, pkg.version]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('unknown command "tain"');
  });

  it.each(SPECS.map((s) => [s.name, s] as const))(
    "%s --help: exit 0, usage on stdout naming every option",
    async (name, spec) => {
      const r = await webart([name, "--help"]);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`usage: webart ${name} [options]`);
      for (const k of Object.keys(spec.options)) expect(r.out).toMatch(new RegExp(`^  --${k}\\b`, "m"));
      expect(r.err).not.toContain("usage:");
    },
  );

  it.each(SPECS.map((s) => [s.name] as const))(
    "%s: an unknown option exits 2 naming it, usage on stderr",
    async (name) => {
      const r = await webart([name, "--no-such-option", "1"]);
      expect(r.code).toBe(2);
      expect(r.err).toContain(`webart ${name}: unknown option "--no-such-option"`);
      expect(r.err).toContain(`usage: webart ${name} [options]`);
      expect(r.out).toBe("");
    },
  );

  it.each([
    ["train", ["--steps", "ten"], '--steps "ten": expected an integer >= 1'],
    ["train", ["--lr=-1"], '--lr "-1": expected a number >= 0'],
    ["train", ["--memory-budget", "lots"], '--memory-budget "lots" is not a size'],
    ["train", ["--env", "chess"], '--env "chess": expected tictactoe, 2048, email or custom'],
    ["train", ["--env", "custom"], "--env custom needs --data FILE"],
    ["train", ["--data", "tasks.jsonl"], "--data is not for --env tictactoe"],
    ["train", ["--group-size"], "--group-size needs a value"],
    ["train", ["--beta", "strong"], '--beta "strong": expected a number >= 0'],
    ["train", ["--decision-reward", "some"], '--decision-reward "some": expected a number >= 0'],
    ["train", ["--env", "2048", "--decision-reward", "0.5"], "--decision-reward is for --env tictactoe only"],
    ["train", ["--explore", "2"], '--explore "2": expected a number in [0, 1]'],
    ["train", ["--env", "2048", "--explore", "0.1"], "--explore is for --env tictactoe or email"],
    [
      "train",
      ["--env", "email", "--explore", "0.1", "--tool-choice", "required"],
      "--explore 0.1: email explores answers among guided calls; pass --tool-choice guided",
    ],
    ["train", ["--env", "2048", "--legal-moves"], "--legal-moves is for --env tictactoe only"],
    ["train", ["--tool-choice", "required"], "--tool-choice is for --env email only"],
    ["train", ["--scale-rewards", "std"], '--scale-rewards "std": expected group or none'],
    ["train", ["--loss-type", "mean"], '--loss-type "mean": expected sequence, token or dr_grpo'],
    ["sft", [], "--data FILE is required"],
    ["sft", ["--data", "x.jsonl", "--epochs", "0"], '--epochs "0": expected an integer >= 1'],
    ["sft", ["--data", "x.jsonl", "--batch-size", "big"], '--batch-size "big": expected an integer >= 1'],
    ["sft", ["--data", "x.jsonl", "--assistant-turns", "first"], '--assistant-turns "first": expected all or last'],
    ["sft", ["--data", "no-such-file.jsonl"], "--data no-such-file.jsonl: ENOENT"],
    [
      "eval",
      ["--env", "email", "--tool-choice", "always"],
      '--tool-choice "always": expected auto, required or guided',
    ],
    ["eval", ["--env", "custom", "--games", "3"], "--games is not for --env custom"],
    ["eval", ["--games", "1.5"], '--games "1.5": expected an integer >= 1'],
    ["eval", ["--checkpoint", "last"], '--checkpoint "last": expected a step number, latest or none'],
    ["serve", ["--port", "70000"], '--port "70000": expected an integer in [0, 65535]'],
    ["serve", ["--kv-slots=0"], '--kv-slots "0": expected an integer in [1, 4096]'],
    ["serve", ["--max-wait", "-5"], '--max-wait -5: write --max-wait=-5 for a value that starts with "-"'],
    ["export", ["--format", "parquet"], '--format "parquet": expected art'],
    ["export", ["--checkpoints", "best"], '--checkpoints "best": expected latest or all'],
    ["pretrain", ["--minutes", "soon"], '--minutes "soon": expected a number >= 0'],
    ["pretrain", ["--skill", "2"], '--skill "2": expected a number in [0, 1]'],
  ])("%s %j: exit 2 naming the flag and value", async (name, args, message) => {
    const r = await webart([name, ...args]);
    expect(r.code).toBe(2);
    expect(r.err).toContain(`webart ${name}: ${message}`);
    expect(r.err).toContain(`usage: webart ${name} [options]`);
  });

  it("info prints the device and the engine's default memory budget for it", async () => {
    const r = await webart(["info"]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^device: /m);
    expect(r.out).toMatch(/^memory budget: (8|16) GiB \(the default on (a CPU device|a GPU)/m);
  });

  it("info --speed measures the embedded model on the device: peak, prefill, decode against the roofline, kernels", async () => {
    // Start-up tuning is timed and saved by the first process, read back by the next.
    const cache = join(mkdtempSync(join(tmpdir(), "webart-info-")), "tuning.json");
    const at = cache.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const r = await webart(["info", "--speed", "--quick"], { WEBART_TUNING_CACHE: cache });
    expect(r.code).toBe(0);
    expect(r.out).toMatch(new RegExp(`^tuning: +\\d+ kernel choices timed in [\\d.]+ s; kept in ${at}$`, "m"));
    const again = await webart(["info", "--speed", "--quick"], { WEBART_TUNING_CACHE: cache });
    expect(again.out).toMatch(new RegExp(`^tuning: +\\d+ read back in [\\d.]+ s from ${at}$`, "m"));
    expect(again.out).toMatch(
      new RegExp(`^tuning cache: ${at} \\([1-9]\\d* start-up tuning choices for this device`, "m"),
    );
    expect(again.out).toMatch(/^ {2}matmul\.nt\.f32@\d+: \w+$/m);
    expect(r.out).toMatch(/^speed of webart-tiny on this device \(--quick\):$/m);
    expect(r.out).toMatch(/^peak: +[\d.]+ GFLOP\/s FMA, [\d.]+ GB\/s copy \(measured now\)$/m);
    expect(r.out).toMatch(/^model: +webart-tiny, 4 layers, [\d.]+ MiB of weights, with a LoRA adapter$/m);
    expect(r.out).toMatch(/^prefill: +[\d.]+ tokens\/s \(one prompt of 64 tokens\)$/m);
    expect(r.out).toMatch(/^decode b1: +[\d.]+ tokens\/s in runs of 8 steps \([\d.]+% of the copy roofline/m);
    expect(r.out).toMatch(/^decode b8: +[\d.]+ tokens\/s in runs of 8 steps \([\d.]+x batch 1\)$/m);
    expect(r.out).toMatch(/^GRPO step: +[\d.]+ s for 2 x 64 tokens, [\d.]+ tokens\/s \(micro-batches of \d+ tokens/m);
    expect(r.out).toMatch(/^ {2}matmul\.nt\.f32@\d+: \w+$/m); // a kernel start-up tuning chose
    expect(r.out.match(/^device: /gm)).toHaveLength(1); // the speed lines leave out the device info printed first
  });

  it("info --quantize without --speed: the option is only for --speed", async () => {
    const r = await webart(["info", "--quantize", "q4"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("webart info: --quantize is for --speed");
  });
});

describe("parseOptions", () => {
  const spec = {
    name: "t",
    about: "",
    options: { n: { default: "3", help: "" }, s: { help: "" }, f: { flag: true, help: "" } },
  } satisfies CommandSpec;

  it("fills defaults, reads --name value and --name=value, flags are booleans; the last of a repeated option wins", () => {
    expect(parseOptions(spec, [])).toEqual({ n: "3", s: undefined, f: false });
    expect(parseOptions(spec, ["--n", "4", "--s=a=b", "--f"])).toEqual({ n: "4", s: "a=b", f: true });
    expect(parseOptions(spec, ["--n", "4", "--n", "5"]).n).toBe("5");
  });

  it("--help (or -h) anywhere is a UsageError with code 0; errors have code 2", () => {
    expect(() => parseOptions(spec, ["--n", "4", "-h"])).toThrow(
      expect.objectContaining({ name: "UsageError", code: 0 }),
    );
    expect(() => parseOptions(spec, ["--f=1"])).toThrow(
      expect.objectContaining({ code: 2, message: '--f takes no value (got "1")' }),
    );
    expect(() => parseOptions(spec, ["x"])).toThrow(/unexpected argument "x"/);
  });

  it("usage: an option too long for the column has its help on the next line, not run into its name", () => {
    const long = { ...spec, options: { scenarios: { arg: "shared|independent", help: "where games start" } } };
    const text = usage(long);
    expect(text).toContain("  --scenarios shared|independent\n" + " ".repeat(28) + "where games start");
    expect(usage(spec)).toMatch(/^ {2}--n X {22}\(default 3\)$/m);
  });
});
