// `webart serve` on the command line: flags -> ServeOptions; SIGINT/SIGTERM -> finish the running step
// (its checkpoint is written) and open requests, then exit 0. A second signal exits at once.
import { EMBEDDED_MODEL, parseBytes } from "@webart/engine";
import { ServeConfigError, startServer, type ServeOptions } from "./server.ts";

export { EMBEDDED_MODEL };

export const SERVE_HELP = `usage: webart serve [options]

An OpenAI-compatible server (GET /v1/models, POST /v1/chat/completions) with the training routes
RemoteBackend uses (/v1/webart/...). Clients use baseURL http://HOST:PORT/v1.

options:
  --model <dir|hf-id>   base model: a folder in HF layout or a Hugging Face repo id (default: the embedded model)
  --adapter <dir>       a PEFT LoRA adapter folder to apply to the base model
  --port <n>            default 8000 (0: any free port)
  --host <addr>         default 127.0.0.1; any non-loopback address needs --api-key-env
  --api-key-env <VAR>   require "Authorization: Bearer $VAR" on every request
  --cors <origin>       let browsers on this origin call the server (e.g. http://localhost:5173); off by default
  --runs <dir>          where training runs live (default .art)
  --kv-slots <n>        sequences decoded at once per model (default 16)
  --max-context <n>     context length per sequence (default min(model's, 2048))
  --memory-budget <sz>  GPU memory the server may use for the base model and every run, e.g. 6GB or 4096MiB;
                        a load or run registration over it is refused before allocating (default 16 GiB on a GPU)
  --max-wait <s>        how long a chat request waits for a training step before 503 + Retry-After (default 300)
`;

/** Parses serve's flags (`--flag value` or `--flag=value`); bad flags throw ServeConfigError. */
export function parseServeArgs(argv: string[], env: Record<string, string | undefined>): ServeOptions {
  const vals = new Map<string, string>();
  const known = [
    "model",
    "adapter",
    "port",
    "host",
    "api-key-env",
    "cors",
    "runs",
    "kv-slots",
    "max-context",
    "max-wait",
    "memory-budget",
  ];
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m || !known.includes(m[1]))
      throw new ServeConfigError(`unknown argument "${argv[i]}" (see webart serve --help)`);
    const v = m[2] ?? argv[++i];
    if (v === undefined || (m[2] === undefined && v.startsWith("--")))
      throw new ServeConfigError(`--${m[1]} needs a value`);
    vals.set(m[1], v);
  }
  const int = (k: string, lo: number, hi: number): number | undefined => {
    const v = vals.get(k);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < lo || n > hi)
      throw new ServeConfigError(`--${k} ${v}: expected an integer in [${lo}, ${hi}]`);
    return n;
  };
  let apiKey: string | undefined;
  const keyVar = vals.get("api-key-env");
  if (keyVar !== undefined) {
    apiKey = env[keyVar];
    if (!apiKey)
      throw new ServeConfigError(`--api-key-env ${keyVar}: the environment variable ${keyVar} is not set or empty`);
  }
  let budget: number | undefined;
  const b = vals.get("memory-budget");
  if (b !== undefined) {
    try {
      budget = parseBytes(b);
    } catch (e) {
      throw new ServeConfigError((e as Error).message);
    }
  }
  const wait = vals.get("max-wait");
  if (wait !== undefined && !(Number(wait) >= 0))
    throw new ServeConfigError(`--max-wait ${wait}: expected seconds >= 0`);
  return {
    model: vals.get("model") ?? EMBEDDED_MODEL,
    adapter: vals.get("adapter"),
    port: int("port", 0, 65535) ?? 8000,
    host: vals.get("host") ?? "127.0.0.1",
    apiKey,
    cors: vals.get("cors"),
    runs: vals.get("runs") ?? ".art",
    kvSlots: int("kv-slots", 1, 4096),
    maxContext: int("max-context", 8, 1 << 20),
    maxWaitMs: wait === undefined ? undefined : Number(wait) * 1000,
    memoryBudget: budget,
  };
}

/** Runs the server until a signal; resolves with the exit code (2 for a refused configuration). */
export async function serveCommand(argv: string[]): Promise<number> {
  if (argv.includes("--help") || argv.includes("-h")) {
    console.log(SERVE_HELP);
    return 0;
  }
  let server;
  try {
    server = await startServer({ ...parseServeArgs(argv, process.env), log: (l) => console.log(l) });
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
