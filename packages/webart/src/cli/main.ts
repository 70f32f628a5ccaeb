#!/usr/bin/env node
// The headless entry: `webart <command>`. Commands are added as the engine grows.
import { getDevice, releaseDawn } from "@webart/gpu";

const HELP = `usage: webart <command> [options]

commands:
  info     print the WebGPU adapter the engine gets in Node, its limits and features
  serve    an OpenAI-compatible HTTP server with training routes (webart serve --help)
  train    GRPO on tic-tac-toe or 2048 with the embedded model (webart train --help)
  eval     a table of win rates: base model, a checkpoint, baselines (webart eval --help)
`;

async function info(): Promise<void> {
  const gpu = await getDevice();
  const { vendor, architecture, description, robustness } = gpu.adapter;
  console.log(`adapter:   ${vendor} ${architecture} (${description})`);
  console.log(`features:  ${[...gpu.features].sort().join(", ")}`);
  console.log(`max storage binding: ${gpu.limits.maxStorageBufferBindingSize / 2 ** 20} MiB`);
  console.log(`robustness: ${robustness ? "on" : "off (Node default, faster)"}`);
}

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case "info":
      await info();
      return 0;
    case "serve":
      return (await import("./serve/cli.ts")).serveCommand(rest);
    case "train":
    case "eval": {
      const { UsageError } = await import("./train/args.ts");
      try {
        return cmd === "train" ? await (await import("./train/train.ts")).trainCommand(rest) : await (await import("./train/eval.ts")).evalCommand(rest);
      } catch (e) {
        if (e instanceof UsageError) {
          (e.code ? console.error : console.log)(e.message);
          return e.code;
        }
        throw e;
      }
    }
    case undefined:
    case "help":
    case "--help":
      console.log(HELP);
      return 0;
    default:
      console.error(`webart: unknown command "${cmd}"\n\n${HELP}`);
      return 2;
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
