// `webart serve`: one HTTP server in front of the engine. /v1/models[/{id}] and /v1/chat/completions go to the
// OpenAI handler (the same one the in-browser client mounts); /v1/webart/* are the training routes of a
// LocalBackend (routes.ts). Security, body limits, CORS and graceful shutdown live here.
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";
import {
  ApiError,
  BaseModels,
  createHandler,
  Engine,
  LocalBackend,
  memorySource,
  WeightReader,
  type EngineOptions,
  readAdapterConfig,
  type LoraConfig,
  startupTuningLine,
} from "@webart/engine";
import { authChecker, isLoopbackHost } from "./auth.ts";
import { TrainGate } from "./gate.ts";
import { readBody, sendError, sendFetchResponse, toFetchRequest } from "./http.ts";
import { TrainingRoutes } from "./routes.ts";

const MiB = 2 ** 20;

export interface ServeOptions {
  /** A model folder (HF layout) or a Hugging Face repo id. */
  model: string;
  /** A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) applied to the base model. */
  adapter?: string;
  /** Default 127.0.0.1; anything but loopback needs apiKey. */
  host?: string;
  /** Default 8000; 0 picks a free port. */
  port?: number;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** The one origin browsers may call from (CORS); "*" for any. Off by default. */
  cors?: string;
  /** Folder of the runs (default ".art"). */
  runs?: string;
  /** KV-cache sequences (concurrent requests batched at once) and context length, per loaded model. */
  kvSlots?: number;
  maxContext?: number;
  /** Bytes the server may hold on the GPU (base model and every run); plans over it are refused before allocating. */
  memoryBudget?: number;
  /** The served base model and every run's as q4 weights (EngineOptions.quantize). */
  quantize?: "q4";
  /** Longest a chat request waits for its model's training step before a 503 with Retry-After (ms, default 300 000). */
  maxWaitMs?: number;
  /** Body size limits in bytes: chat 4 MiB, train/log 32 MiB, other routes 1 MiB. */
  limits?: Partial<{ chat: number; train: number; other: number }>;
  /** Long train steps: headers sent after commitMs (default 10 s), then a space every heartbeatMs (15 s). */
  commitMs?: number;
  heartbeatMs?: number;
  log?: (line: string) => void;
}

export interface RunningServer {
  /** e.g. http://127.0.0.1:8000 (clients use `${url}/v1`). */
  url: string;
  port: number;
  /** The base model's name in /v1/models and chat requests. */
  name: string;
  engine: Engine;
  backend: LocalBackend;
  /** Stops accepting, lets the running step finish (and checkpoint) and in-flight requests end, frees the models. */
  close(opts?: { graceMs?: number }): Promise<void>;
}

/** A configuration the server refuses to start with (the CLI exits 2). */
export class ServeConfigError extends Error {
  override name = "ServeConfigError";
}

/** Applies a PEFT LoRA adapter folder to the engine's base model (for serving only). */
async function loadAdapter(engine: Engine, dir: string): Promise<void> {
  const cfgPath = join(dir, "adapter_config.json");
  let config: LoraConfig;
  try {
    config = readAdapterConfig(JSON.parse(await readFile(cfgPath, "utf8")), cfgPath);
  } catch (e) {
    throw new ServeConfigError(
      e instanceof SyntaxError ? `${cfgPath}: not valid JSON (${e.message})` : (e as Error).message,
    );
  }
  const lora = engine.attachLora(config);
  const file = join(dir, "adapter_model.safetensors");
  await lora.load(await WeightReader.fromSource(memorySource(new Uint8Array(await readFile(file)), file)));
  engine.scheduler.invalidateCache();
}

/** Decoded path segments; '.', '..', empty segments and encoded '/' or '\' are refused. */
function pathSegments(raw: string): string[] {
  const parts = raw.split("/").slice(1);
  if (parts[parts.length - 1] === "") parts.pop(); // "/v1/models/" is "/v1/models"
  return parts.map((p) => {
    let s: string;
    try {
      s = decodeURIComponent(p);
    } catch {
      throw new ApiError(400, `the path segment "${p}" is not valid percent-encoding`, null, "invalid_path");
    }
    if (s === "" || s === "." || s === ".." || /[/\\\0]/.test(s))
      throw new ApiError(400, `the path segment ${JSON.stringify(s)} is not allowed`, null, "invalid_path");
    return s;
  });
}

/** Checks the options, loads the model, and listens. Rejects with ServeConfigError for a refused configuration. */
export async function startServer(o: ServeOptions): Promise<RunningServer> {
  const host = o.host ?? "127.0.0.1";
  const log = o.log ?? (() => {});
  if (!isLoopbackHost(host) && !o.apiKey) {
    throw new ServeConfigError(
      `--host ${host} is reachable from other machines: set an API key with --api-key-env VAR (the server will not listen there without one)`,
    );
  }
  if (o.cors !== undefined && o.cors !== "*" && !/^https?:\/\/[^/\s]+$/.test(o.cors)) {
    throw new ServeConfigError(
      `--cors "${o.cors}" is not an origin like http://localhost:5173 (scheme://host[:port], no path)`,
    );
  }
  const limits = { chat: 4 * MiB, train: 32 * MiB, other: 1 * MiB, ...o.limits };
  const maxWaitMs = o.maxWaitMs ?? 300_000;
  // One registry for the served engine and the runs' engines: runs of the served base model share its weights.
  const engineOpts: EngineOptions = {
    kvSlots: o.kvSlots,
    maxContext: o.maxContext,
    memoryBudget: o.memoryBudget,
    quantize: o.quantize,
    bases: new BaseModels(),
  };
  const engine = await Engine.load(o.model, engineOpts);
  if (o.adapter) await loadAdapter(engine, o.adapter).catch((e) => engine.close().then(() => Promise.reject(e)));
  const backend = new LocalBackend({ path: o.runs ?? ".art", engine: engineOpts });
  const gate = new TrainGate();
  const auth = authChecker(o.apiKey);
  let closing = false;
  const routes = new TrainingRoutes({
    backend,
    base: { source: o.model, name: engine.name },
    gate,
    isClosing: () => closing,
    limits,
    commitMs: o.commitMs ?? 10_000,
    heartbeatMs: o.heartbeatMs ?? 15_000,
    log,
  });
  const handler = createHandler({ models: () => [...engine.served, ...routes.served()] });

  const corsHeaders = (req: IncomingMessage): Record<string, string> => {
    const origin = req.headers.origin;
    if (!o.cors || !origin || (o.cors !== "*" && origin !== o.cors)) return {};
    return {
      "access-control-allow-origin": o.cors === "*" ? "*" : origin,
      vary: "Origin",
      "access-control-expose-headers": "retry-after, x-webart-step, x-request-id",
    };
  };

  const chat = async (req: IncomingMessage, res: ServerResponse, path: string, cors: Record<string, string>) => {
    const body = await readBody(req, limits.chat);
    let model: unknown;
    try {
      model = (JSON.parse(body.toString("utf8")) as { model?: unknown })?.model;
    } catch {
      // The handler answers malformed JSON with its own 400.
    }
    if (typeof model === "string") {
      const retry = await gate.wait(model, maxWaitMs);
      if (retry !== null) {
        throw new ApiError(
          503,
          `model "${model}" is training a step; retry in ${retry} s`,
          null,
          "model_training",
          "server_error",
          { "retry-after": String(retry) },
        );
      }
    }
    const ac = new AbortController();
    res.on("close", () => !res.writableFinished && ac.abort());
    await sendFetchResponse(res, await handler(toFetchRequest(req, path, body, ac.signal)), cors);
  };

  let inflight = 0;
  let idle: (() => void) | null = null;
  const onRequest = async (req: IncomingMessage, res: ServerResponse) => {
    inflight++;
    res.on("close", () => {
      inflight--;
      if (inflight === 0) idle?.();
    });
    const cors = corsHeaders(req);
    try {
      if (closing) {
        res.setHeader("connection", "close");
        throw new ApiError(503, "the server is shutting down", null, "shutting_down");
      }
      const origin = req.headers.origin;
      if (origin && !cors["access-control-allow-origin"]) {
        throw new ApiError(
          403,
          `requests from origin ${origin} are not allowed (start the server with --cors ${origin} to allow them)`,
          null,
          "forbidden",
        );
      }
      if (req.method === "OPTIONS") {
        res.writeHead(204, {
          ...cors,
          "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
          "access-control-allow-headers":
            req.headers["access-control-request-headers"] ?? "authorization, content-type",
          "access-control-max-age": "600",
        });
        return void res.end();
      }
      auth(req.headers.authorization, req.socket.remoteAddress);
      // Without a key the server trusts loopback only; a Host that is not loopback means DNS rebinding.
      const hostName = (req.headers.host ?? "").replace(/:\d+$/, "");
      if (!o.apiKey && !isLoopbackHost(hostName))
        throw new ApiError(403, `Host "${req.headers.host}" is not a loopback name`, null, "forbidden");
      const raw = (req.url ?? "/").split("?")[0];
      if (!raw.startsWith("/"))
        throw new ApiError(400, `bad request target ${JSON.stringify(req.url)}`, null, "invalid_path");
      const segs = pathSegments(raw);
      const path = "/" + segs.join("/");
      if (segs[0] === "v1" && segs[1] === "webart") {
        await routes.handle(req, res, segs.slice(2), cors);
      } else if (segs[0] === "v1" && segs[1] === "models" && segs.length <= 3 && req.method === "GET") {
        await sendFetchResponse(
          res,
          await handler(toFetchRequest(req, path, null, new AbortController().signal)),
          cors,
        );
      } else if (path === "/v1/chat/completions") {
        if (req.method !== "POST")
          throw new ApiError(405, `${req.method} is not allowed on ${path}; use POST`, null, "method_not_allowed");
        await chat(req, res, path, cors);
      } else {
        throw new ApiError(404, `Unknown route ${req.method} ${path}`, null, "unknown_url");
      }
    } catch (e) {
      if (!(e instanceof ApiError) || e.status >= 500)
        log(`error: ${req.method} ${req.url}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
      sendError(res, e, cors);
    }
  };

  const server = createServer((req, res) => void onRequest(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        e.code === "EADDRINUSE"
          ? new ServeConfigError(`port ${o.port ?? 8000} on ${host} is in use: pick another with --port`)
          : e,
      ),
    );
    server.listen(o.port ?? 8000, host, () => resolve());
  }).catch((e) => engine.close().then(() => Promise.reject(e)));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : (o.port ?? 8000);
  const url = `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${port}`;

  let closed: Promise<void> | null = null;
  const close = ({ graceMs = 30_000 } = {}) =>
    (closed ??= (async () => {
      closing = true;
      server.close();
      server.closeIdleConnections();
      // The running step ends with its checkpoint written (LocalBackend.train); queued ones are refused.
      await Promise.allSettled([...gate.pending(), routes.settled()]);
      if (inflight > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          new Promise<void>((r) => (idle = r)),
          new Promise<void>((r) => (timer = setTimeout(r, graceMs))),
        ]);
        clearTimeout(timer);
      }
      server.closeAllConnections();
      await backend.close();
      await engine.close();
    })());

  log(`webart serve: ${startupTuningLine(engine.startupTuning)}`);
  log(
    `webart serve: ${url}/v1 serving ${engine.name} (${o.model}${o.adapter ? ` + adapter ${o.adapter}` : ""}); ${o.apiKey ? "API key required" : "loopback clients only, no API key"}${o.cors ? `; CORS for ${o.cors}` : ""}`,
  );
  return { url, port, name: engine.name, engine, backend, close };
}
