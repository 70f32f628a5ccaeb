// `webart serve` on the command line: flags -> ServeOptions; SIGINT/SIGTERM -> finish the running step
// (its checkpoint is written) and open requests, then exit 0. A second signal exits at once.
import { EMBEDDED_MODEL } from "@webart/engine";
import { bytes, num, parseOptions, QUANTIZE_OPTION, quantizeOption, UsageError, type CommandSpec } from "../args.ts";
import { ServeConfigError, startServer, type ServeOptions } from "./server.ts";

export { EMBEDDED_MODEL };

export const SERVE = {
  name: "serve",
  about:
    "An OpenAI-compatible server (GET /v1/models, POST /v1/chat/completions) with the training routes\n" +
    "RemoteBackend uses (/v1/webart/...). Clients use baseURL http://HOST:PORT/v1.",
  options: {
    model: {
      arg: "DIR|ID",
      default: EMBEDDED_MODEL,
      help: "base model: a folder in HF layout or a Hugging Face repo id",
    },
    adapter: { arg: "DIR", help: "a PEFT LoRA adapter folder to apply to the base model" },
    port: { arg: "N", default: "8000", help: "port to listen on (0: any free port)" },
    host: {
      arg: "ADDR",
      default: "127.0.0.1",
      help: "address to listen on; any non-loopback address needs --api-key-env",
    },
    "api-key-env": { arg: "VAR", help: 'require "Authorization: Bearer $VAR" on every request' },
    cors: {
      arg: "ORIGIN",
      help: "let browsers on this origin call the server (e.g. http://localhost:5173); off by default",
    },
    runs: { arg: "DIR", default: ".art", help: "where training runs live" },
    "kv-slots": { arg: "N", help: "sequences decoded at once per model (default 16)" },
    "max-context": { arg: "N", help: "context length per sequence (default min(model's, 2048))" },
    "memory-budget": {
      arg: "SIZE",
      help:
        "GPU memory for the base model and every run, e.g. 6GB or 4096MiB; a load or run registration\n" +
        "over it is refused before allocating (default 16 GiB on a GPU, 8 GiB on a CPU device: webart info)",
    },
    ...QUANTIZE_OPTION,
    "max-wait": {
      arg: "SECONDS",
      default: "300",
      help: "how long a chat request waits for a training step before 503 + Retry-After",
    },
  },
} satisfies CommandSpec;

/** Serve's options from its command line and the environment (for --api-key-env); bad values throw UsageError. */
export function parseServeArgs(argv: string[], env: Record<string, string | undefined>): ServeOptions {
  const a = parseOptions(SERVE, argv);
  const int = (k: "port" | "kv-slots" | "max-context", lo: number, hi: number) => {
    const v = a[k];
    return v === undefined ? undefined : num(k, v, { int: true, min: lo, max: hi });
  };
  let apiKey: string | undefined;
  const keyVar = a["api-key-env"];
  if (keyVar !== undefined) {
    apiKey = env[keyVar];
    if (!apiKey)
      throw new UsageError(`--api-key-env ${keyVar}: the environment variable ${keyVar} is not set or empty`);
  }
  return {
    model: a.model,
    adapter: a.adapter,
    port: int("port", 0, 65535),
    host: a.host,
    apiKey,
    cors: a.cors,
    runs: a.runs,
    kvSlots: int("kv-slots", 1, 4096),
    maxContext: int("max-context", 8, 1 << 20),
    maxWaitMs: num("max-wait", a["max-wait"], { min: 0 }) * 1000,
    memoryBudget: bytes("memory-budget", a["memory-budget"]),
    quantize: quantizeOption(a.quantize),
  };
}

/** Runs the server until a signal; resolves with the exit code (2 for a configuration the server refuses). */
export async function serveCommand(argv: string[]): Promise<number> {
  const opts = parseServeArgs(argv, process.env);
  let server;
  try {
    server = await startServer({ ...opts, log: (l) => console.log(l) });
  } catch (e) {
    if (e instanceof ServeConfigError) {
      console.error(`webart serve: ${e.message}`);
      return 2;
    }
    throw e;
  }
  const running = server;
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (sig: string) => {
      if (stopping) {
        console.error(`webart serve: ${sig} again: exiting now`);
        process.exit(130);
      }
      stopping = true;
      console.log(
        `webart serve: ${sig}: finishing the running step and open requests, then exiting (${sig} again to exit now)`,
      );
      running.close().then(
        () => {
          console.log("webart serve: stopped");
          resolve(0);
        },
        (e: Error) => {
          console.error(`webart serve: error while stopping: ${e.message}`);
          resolve(1);
        },
      );
    };
    process.on("SIGINT", () => stop("SIGINT"));
    process.on("SIGTERM", () => stop("SIGTERM"));
  });
}
