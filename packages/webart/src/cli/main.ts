#!/usr/bin/env node
// The headless entry: `webart <command> [options]`. Each command is loaded when it runs; its options spec gives
// both its parsing and its --help (args.ts).
import { readFileSync } from "node:fs";
import { releaseDawn } from "@webart/gpu";
import { usage, UsageError, type CommandSpec } from "./args.ts";

interface Command {
  spec: CommandSpec;
  run(argv: string[]): Promise<number>;
}

const COMMANDS: Record<string, { summary: string; load(): Promise<Command> }> = {
  train: {
    summary: "GRPO on tic-tac-toe, 2048 or email search with the embedded model",
    load: async () => import("./train/train.ts").then((m) => ({ spec: m.TRAIN, run: m.trainCommand })),
  },
  sft: {
    summary: "supervised fine-tuning of a run on conversations from a JSONL file (a warm start before GRPO)",
    load: async () => import("./sft.ts").then((m) => ({ spec: m.SFT, run: m.sftCommand })),
  },
  eval: {
    summary: "a table of win rates: base model, a checkpoint, baselines",
    load: async () => import("./train/eval.ts").then((m) => ({ spec: m.EVAL, run: m.evalCommand })),
  },
  serve: {
    summary: "an OpenAI-compatible HTTP server with training routes",
    load: async () => import("./serve/cli.ts").then((m) => ({ spec: m.SERVE, run: m.serveCommand })),
  },
  export: {
    summary: "a run in OpenPipe ART's layout and JSON, to continue it with ART",
    load: async () => import("./export.ts").then((m) => ({ spec: m.EXPORT, run: m.exportCommand })),
  },
  info: {
    summary: "the WebGPU device the engine gets in Node and the default memory budget",
    load: async () => import("./info.ts").then((m) => ({ spec: m.INFO, run: m.infoCommand })),
  },
  pretrain: {
    summary: "make the embedded model (webart-tiny) from nothing into a folder",
    load: async () => import("./pretrain/pretrain.ts").then((m) => ({ spec: m.PRETRAIN, run: m.pretrainCommand })),
  },
};

const HELP = `usage: webart <command> [options]

commands:
${Object.entries(COMMANDS)
  .map(([name, c]) => `  ${name.padEnd(10)}${c.summary}`)
  .join("\n")}

webart <command> --help lists a command's options; webart --version prints the version.`;

/** The version in package.json, beside dist/ where this file is built to (dist/cli.js). */
function version(): string {
  return (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }).version;
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === "help" || cmd === "--help" || cmd === "-h") {
    console.log(HELP);
    return 0;
  }
  if (cmd === "--version" || cmd === "-v") {
    console.log(version());
    return 0;
  }
  const entry = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!entry) {
    console.error(`webart: unknown command ${JSON.stringify(cmd)}\n\n${HELP}`);
    return 2;
  }
  const command = await entry.load();
  try {
    return await command.run(rest);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    if (e.code === 0) console.log(usage(command.spec));
    else console.error(`webart ${cmd}: ${e.message}\n\n${usage(command.spec)}`);
    return e.code;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    releaseDawn();
    process.exit(code);
  },
  (e: Error) => {
    console.error(`webart: ${e.message}`);
    process.exit(1);
  },
);
