// ruler(): scores a group of conversations relative to each other with an LLM judge behind any
// OpenAI-compatible endpoint, retrying bad answers, rate limits, server errors and timeouts itself.
import OpenAI, { APIConnectionError, APIConnectionTimeoutError } from "openai";
import type { ChatCompletion, ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";
import { choiceToMessage, isChoice, type MessageOrChoice, type Tool } from "@webart/engine";
import { allIdentical, buildJudgePrompt, DEFAULT_RUBRIC, scoresResponseFormat, type JudgePrompt } from "./prompt.ts";
import { extractJsonObject, parseScores, RefusedReply, type TrajectoryScore } from "./reply.ts";

export interface RulerOptions {
  /** An `openai` SDK client for the judge (OpenAI, OpenRouter, Ollama, vLLM, webart's own); its retries are turned off per request. */
  client?: OpenAI;
  /** Or the endpoint's base URL (e.g. "http://127.0.0.1:11434/v1"): a client is made with maxRetries: 0. */
  baseURL?: string;
  /** Key for baseURL (default: OPENAI_API_KEY; servers that need none accept any string). Never logged. */
  apiKey?: string;
  /** The judge: its name at the endpoint of `client` / `baseURL`, or a Model (ART's art.Model: a prompted model at
   *  any OpenAI-compatible endpoint, or a TrainableModel), whose own client and inference name are used. */
  model: string | JudgeModel;
  /** What a good trajectory is; replaces DEFAULT_RUBRIC. */
  rubric?: string;
  /** Tools the agent could call, shown to the judge. */
  tools?: Tool[];
  /** Further attempts after the first fails (bad answer, HTTP 408/429/5xx, connection error, timeout). Default 2. */
  maxRetries?: number;
  /** Limit on each attempt, whole reply included, in ms. Default 300 000. */
  timeoutMs?: number;
  /** Wait before the first retry in ms, doubled for each later one (at most 8 s). Default 500. */
  backoffMs?: number;
  /** A Retry-After up to this is waited out; a longer one ends the retries. Default 30 000 ms. */
  maxRetryAfterMs?: number;
  /** Clamp finite scores outside [0, 1] instead of refusing the answer. Default false. */
  clampScores?: boolean;
  /** Extra request fields (temperature, max_tokens, reasoning_effort, provider routing, ...). */
  requestParams?: Record<string, unknown>;
  /** Log requests, replies and retries (true: console.error; or a function taking each line). Keys are redacted. */
  debug?: boolean | ((line: string) => void);
}

/** What RULER needs of a judge Model: ArtModel ("webart"'s Model) and TrainableModel have both. */
export interface JudgeModel {
  openaiClient(): OpenAI;
  getInferenceName(): string;
}

/** One failed attempt: why it was refused and what the judge sent (redacted, untruncated). */
export interface JudgeAttempt {
  reason: string;
  reply?: string;
  status?: number;
}

/** The judge gave no usable answer; `attempts` holds every try. */
export class RulerError extends Error {
  constructor(
    message: string,
    readonly attempts: JudgeAttempt[],
  ) {
    super(message);
    this.name = "RulerError";
  }
}

const RESERVED = ["model", "messages", "response_format", "stream", "n"];
const TRUNCATE = 400;

function truncate(s: string): string {
  return s.length <= TRUNCATE ? s : `${s.slice(0, TRUNCATE)}… (${s.length} chars in all)`;
}

/** Replaces every secret in `text`; keys shorter than 8 chars ("none", "ollama") are not secrets. */
export function redact(text: string, secrets: (string | null | undefined)[]): string {
  let out = text;
  for (const s of secrets) if (s && s.length >= 8) out = out.split(s).join("[redacted]");
  return out;
}

/** The endpoint for messages, without credentials or query (either may carry a key). */
function endpointOf(baseURL: string): string {
  try {
    const u = new URL(baseURL);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return "(unparseable baseURL)";
  }
}

function checkCount(name: string, v: number | undefined, def: number, integer: boolean): number {
  if (v === undefined) return def;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || (integer && !Number.isInteger(v))) {
    throw new Error(`ruler: ${name}: ${String(v)} is not a ${integer ? "non-negative integer" : "number >= 0"}`);
  }
  return v;
}

function makeClient(opts: RulerOptions, timeoutMs: number): OpenAI {
  if (typeof opts.model === "object") {
    if (opts.client || opts.baseURL !== undefined || opts.apiKey !== undefined)
      throw new Error("ruler: model is a Model with its own endpoint; pass no client, baseURL or apiKey beside it");
    return opts.model.openaiClient();
  }
  if (opts.client && (opts.baseURL !== undefined || opts.apiKey !== undefined)) {
    throw new Error("ruler: pass either client, or baseURL and apiKey, not both");
  }
  if (opts.client) return opts.client;
  try {
    return new OpenAI({
      baseURL: opts.baseURL,
      apiKey: opts.apiKey,
      maxRetries: 0,
      timeout: timeoutMs,
      dangerouslyAllowBrowser: true,
    });
  } catch (e) {
    throw new Error(
      `ruler: could not create a client for ${endpointOf(opts.baseURL ?? "https://api.openai.com/v1")}: ` +
        `${e instanceof Error ? e.message : String(e)} (for a server that needs no key, pass apiKey: "none")`,
      { cause: e },
    );
  }
}

class AttemptTimeout extends Error {}

/** Runs the request with a hard limit on the whole attempt, even if a custom fetch ignores the abort signal. */
async function withTimeout(
  client: OpenAI,
  body: ChatCompletionCreateParamsNonStreaming,
  timeoutMs: number,
): Promise<ChatCompletion> {
  const abort = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      abort.abort();
      reject(new AttemptTimeout(`no complete reply within timeoutMs ${timeoutMs}`));
    }, timeoutMs);
  });
  try {
    const request = client.chat.completions.create(body, { signal: abort.signal, maxRetries: 0, timeout: timeoutMs });
    return await Promise.race([request, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** Retry-After in ms from an error's headers (retry-after-ms, or retry-after in seconds or as a date). */
function retryAfterMs(e: unknown): number | undefined {
  const headers = (e as { headers?: { get?(name: string): string | null } }).headers;
  if (typeof headers?.get !== "function") return undefined;
  const ms = Number.parseFloat(headers.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const ra = headers.get("retry-after");
  if (!ra) return undefined;
  const s = Number.parseFloat(ra);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const date = Date.parse(ra);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined;
}

interface Failure extends JudgeAttempt {
  retryable: boolean;
  waitMs?: number;
}

/** The underlying network error, e.g. " (fetch failed: ECONNREFUSED)". */
function causeOf(e: unknown): string {
  const cause = (e as { cause?: { message?: unknown; cause?: { code?: unknown; message?: unknown } } }).cause;
  if (!cause) return "";
  const inner = cause.cause?.code ?? cause.cause?.message;
  return ` (${String(cause.message)}${typeof inner === "string" ? `: ${inner}` : ""})`;
}

/** What went wrong in one attempt. Duck-typed, so a client from another copy of the SDK works too. */
function classify(e: unknown): Failure {
  if (e instanceof RefusedReply) return { reason: e.reason, reply: e.reply, retryable: true };
  if (e instanceof AttemptTimeout) return { reason: `timed out: ${e.message}`, retryable: true };
  const err = e as { status?: unknown; error?: unknown; message?: unknown; name?: unknown };
  const message = typeof err?.message === "string" ? err.message : String(e);
  if (typeof err?.status === "number") {
    const status = err.status;
    const retryable = status === 408 || status === 429 || status >= 500;
    const reply = err.error === undefined ? undefined : JSON.stringify(err.error);
    return { reason: `HTTP ${status}: ${message}`, reply, status, retryable, waitMs: retryAfterMs(e) };
  }
  // instanceof for this copy of the SDK, the class name for another (names survive in unminified builds).
  const kind = (e as { constructor?: { name?: string } })?.constructor?.name;
  if (e instanceof APIConnectionTimeoutError || kind === "APIConnectionTimeoutError") {
    return { reason: `timed out: ${message}`, retryable: true };
  }
  if (e instanceof APIConnectionError || kind === "APIConnectionError") {
    return { reason: `connection failed: ${message}${causeOf(e)}`, retryable: true };
  }
  return { reason: `${typeof err?.name === "string" ? err.name : "error"}: ${message}`, retryable: false };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Settings {
  client: OpenAI;
  model: string;
  maxRetries: number;
  timeoutMs: number;
  backoffMs: number;
  maxRetryAfterMs: number;
  clamp: boolean;
  requestParams: Record<string, unknown>;
  log?: (line: string) => void;
  secrets: (string | null | undefined)[];
}

/** Sends the prompt until the judge gives a usable answer or the retries run out. */
async function askJudge(prompt: JudgePrompt, s: Settings): Promise<TrajectoryScore[]> {
  const total = s.maxRetries + 1;
  const endpoint = endpointOf(s.client.baseURL);
  const log = s.log && ((line: string) => s.log!(redact(line, s.secrets)));
  const body: ChatCompletionCreateParamsNonStreaming = {
    ...s.requestParams,
    model: s.model,
    messages: prompt.messages,
    response_format: scoresResponseFormat(prompt.ids),
  };
  const failures: Failure[] = [];
  for (let attempt = 1; attempt <= total; attempt++) {
    log?.(`ruler: attempt ${attempt}/${total}: ${endpoint} model ${s.model}, ${prompt.ids.length} trajectories`);
    if (attempt === 1) log?.(`ruler: prompt:\n${String(prompt.messages[1].content)}`);
    const t0 = Date.now();
    try {
      const completion = await withTimeout(s.client, body, s.timeoutMs);
      const choice = completion.choices?.[0];
      const text = choice?.message?.content ?? "";
      log?.(`ruler: reply after ${Date.now() - t0} ms (finish_reason ${choice?.finish_reason}):\n${pretty(text)}`);
      if (!text.trim()) {
        const refusal = choice?.message?.refusal;
        throw new RefusedReply(
          refusal ? `the judge refused: ${refusal}` : "the reply has no content",
          JSON.stringify(completion),
        );
      }
      try {
        return parseScores(text, prompt.ids, s.clamp);
      } catch (e) {
        if (e instanceof RefusedReply && choice.finish_reason === "length") {
          throw new RefusedReply(`${e.reason} (the reply was cut off at max_tokens)`, e.reply);
        }
        throw e;
      }
    } catch (e) {
      const f = classify(e);
      failures.push(f);
      if (!f.retryable || attempt === total) break;
      if (f.waitMs !== undefined && f.waitMs > s.maxRetryAfterMs) {
        f.reason += ` (Retry-After ${Math.round(f.waitMs / 1000)} s exceeds maxRetryAfterMs ${s.maxRetryAfterMs}, so not retried)`;
        break;
      }
      const wait = f.waitMs ?? Math.min(8000, s.backoffMs * 2 ** (attempt - 1));
      log?.(`ruler: attempt ${attempt} refused: ${f.reason}; retrying in ${Math.round(wait)} ms`);
      await sleep(wait);
    }
  }
  throw failureError(s, endpoint, failures, total);
}

function failureError(s: Settings, endpoint: string, failures: Failure[], total: number): RulerError {
  const clean = (t: string) => redact(t, s.secrets);
  const attempts: JudgeAttempt[] = failures.map((f) => ({
    reason: clean(f.reason),
    ...(f.reply !== undefined ? { reply: clean(f.reply) } : {}),
    ...(f.status !== undefined ? { status: f.status } : {}),
  }));
  const last = attempts[attempts.length - 1];
  const ranOut = failures.length === total && failures[failures.length - 1].retryable;
  const head = ranOut
    ? `ruler: judge ${s.model} at ${endpoint} gave no usable answer in ${total} attempts (maxRetries ${s.maxRetries})`
    : `ruler: judge ${s.model} at ${endpoint} failed on attempt ${attempts.length} (not retried)`;
  const earlier = attempts.slice(0, -1).map((a, i) => `${i + 1}) ${truncate(a.reason)}`);
  const message =
    `${head}. Refused because: ${last.reason}.` +
    (last.reply !== undefined ? ` The judge returned: ${truncate(last.reply)}` : "") +
    (earlier.length ? ` Earlier attempts: ${earlier.join("; ")}` : "");
  return new RulerError(message, attempts);
}

function pretty(text: string): string {
  try {
    return JSON.stringify(extractJsonObject(text), null, 2);
  } catch {
    return text;
  }
}

/** Where warnings go: the debug function when one is given, else console.warn. */
export function warner(debug: RulerOptions["debug"]): (line: string) => void {
  return typeof debug === "function" ? debug : (line) => console.warn(line);
}

/**
 * Scores each message list relative to the others with an LLM judge; returns one score per list,
 * in order, with trajectoryId "1", "2", ... as the judge saw them. When every list is identical one
 * is judged and its score copied. Throws RulerError when the judge gives no usable answer.
 */
export async function ruler(messageLists: MessageOrChoice[][], opts: RulerOptions): Promise<TrajectoryScore[]> {
  const judge = opts?.model;
  const modelName =
    typeof judge === "object" && judge !== null && typeof judge.getInferenceName === "function"
      ? judge.getInferenceName()
      : judge;
  if (typeof modelName !== "string" || !modelName)
    throw new Error("ruler: model: expected the judge model's name, or a Model");
  const maxRetries = checkCount("maxRetries", opts.maxRetries, 2, true);
  const timeoutMs = checkCount("timeoutMs", opts.timeoutMs, 300_000, false);
  if (timeoutMs === 0) throw new Error("ruler: timeoutMs: 0 is not a time limit (expected ms > 0)");
  const backoffMs = checkCount("backoffMs", opts.backoffMs, 500, false);
  const maxRetryAfterMs = checkCount("maxRetryAfterMs", opts.maxRetryAfterMs, 30_000, false);
  const requestParams = opts.requestParams ?? {};
  const reserved = RESERVED.filter((k) => k in requestParams);
  if (reserved.length) throw new Error(`ruler: requestParams: ${reserved.join(", ")} is set by ruler itself`);
  const client = makeClient(opts, timeoutMs);
  if (messageLists.length === 0) return [];

  const lists = messageLists.map((l) => l.map((m) => (isChoice(m) ? choiceToMessage(m) : m)));
  const identical = lists.length > 1 && allIdentical(lists);
  const secrets = [opts.apiKey, client.apiKey];
  const log = opts.debug === true ? (l: string) => console.error(l) : opts.debug || undefined;
  if (identical) {
    warner(opts.debug)(`ruler: all ${lists.length} trajectories are identical; judging one and copying its score`);
  }
  const prompt = buildJudgePrompt(identical ? [lists[0]] : lists, opts.rubric ?? DEFAULT_RUBRIC, opts.tools);
  const scores = await askJudge(prompt, {
    client,
    model: modelName,
    maxRetries,
    timeoutMs,
    backoffMs,
    maxRetryAfterMs,
    clamp: opts.clampScores ?? false,
    requestParams,
    log,
    secrets,
  });
  if (!identical) return scores;
  return lists.map((_, i) => ({ ...scores[0], trajectoryId: String(i + 1) }));
}
