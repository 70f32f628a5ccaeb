// node:http glue: request bodies read under a size limit, IncomingMessage -> Fetch Request for the
// OpenAI handler, and Fetch Response -> ServerResponse with the body streamed as it is produced (SSE).
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "@webart/engine";

/** Bytes a rejected request may still send (and we discard) before its connection is cut. */
const DRAIN_LIMIT = 64 * 2 ** 20;

/**
 * Reads the whole body, or throws a 413 ApiError once it is over `limit` bytes (by Content-Length when
 * given, else while reading). The rest of a rejected body is read and discarded (up to DRAIN_LIMIT), so
 * the client finishes its upload and sees the 413 instead of a reset connection.
 */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const tooLarge = (n: string) =>
    new ApiError(
      413,
      `the request body is ${n} bytes, over this route's limit of ${limit} bytes`,
      null,
      "request_too_large",
    );
  const declared = Number(req.headers["content-length"] ?? NaN);
  if (declared > limit) {
    discard(req);
    throw tooLarge(String(declared));
  }
  // Events, not for-await: leaving a for-await loop early would destroy the socket before the 413 is sent.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size <= limit) return void chunks.push(c);
      cleanup();
      discard(req);
      reject(tooLarge(`more than ${limit}`));
    };
    const onEnd = () => (cleanup(), resolve(Buffer.concat(chunks)));
    const onError = (e: Error) => (cleanup(), reject(e));
    const onAborted = () => (
      cleanup(),
      reject(new ApiError(400, "the client closed the connection before the body ended"))
    );
    const cleanup = () => {
      req.off("data", onData).off("end", onEnd).off("error", onError).off("aborted", onAborted);
    };
    req.on("data", onData).on("end", onEnd).on("error", onError).on("aborted", onAborted);
  });
}

/** Discards the rest of a request body; a client that sends more than DRAIN_LIMIT is cut off. */
export function discard(req: IncomingMessage): void {
  if (req.readableEnded) return;
  let n = 0;
  req.on("data", (c: Buffer) => {
    n += c.length;
    if (n > DRAIN_LIMIT) req.socket.destroy();
  });
  req.resume();
}

/** Parses a JSON body; malformed JSON is an OpenAI-style 400. */
export function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (e) {
    throw new ApiError(400, `the request body is not valid JSON: ${(e as Error).message}`, null, "invalid_json");
  }
}

/** The Fetch Request the OpenAI handler takes (only the headers it reads are carried over). */
export function toFetchRequest(req: IncomingMessage, path: string, body: Buffer | null, signal: AbortSignal): Request {
  const headers = new Headers();
  const ct = req.headers["content-type"];
  if (ct) headers.set("content-type", ct);
  return new Request(`http://webart.local${path}`, {
    method: req.method,
    headers,
    body: body && req.method !== "GET" && req.method !== "HEAD" ? (body as Uint8Array<ArrayBuffer>) : undefined,
    signal,
  });
}

/** Writes a Fetch Response, streaming its body chunk by chunk (with backpressure) until it ends or the client goes. */
export async function sendFetchResponse(
  res: ServerResponse,
  r: Response,
  extra: Record<string, string>,
): Promise<void> {
  const headers: Record<string, string> = { ...extra };
  r.headers.forEach((v, k) => (headers[k] = v));
  res.writeHead(r.status, headers);
  if (!r.body) {
    res.end();
    return;
  }
  const reader = r.body.getReader();
  const gone = () => void reader.cancel().catch(() => {});
  res.on("close", gone);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || res.destroyed) break;
      if (!res.write(value)) await new Promise<void>((ok) => (res.once("drain", ok), res.once("close", ok)));
    }
  } finally {
    res.off("close", gone);
    res.end();
  }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

/** An error as OpenAI shapes it ({ error: { message, type, param, code } }), with its status and headers. */
export function sendError(res: ServerResponse, e: unknown, headers: Record<string, string> = {}): void {
  const err =
    e instanceof ApiError ? e : new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`);
  if (res.headersSent) {
    res.end();
    return;
  }
  sendJson(res, err.status, err.toJSON(), { ...headers, ...err.headers });
}
