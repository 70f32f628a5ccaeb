// The OpenAI-compatible request handler (Fetch API Request → Response): GET /v1/models[/{id}] and
// POST /v1/chat/completions with streaming, n, logprobs, tools and response_format. The in-process
// client, the Web Worker client and the HTTP server all mount this one handler.
import type { ChatTokenizer } from "../art/tokenize.ts";
import type { GenerateResult, Generator, TokenConstraint, TokenEvent } from "../generate/types.ts";
import { ApiError, badRequest, errorResponse, jsonResponse } from "./errors.ts";
import { parseToolCalls, StopMatcher, TOOL_OPEN } from "./tools.ts";
import { parseChatRequest, type ChatRequest } from "./validate.ts";

export interface HandlerTokenizer extends ChatTokenizer {
  applyChatTemplate(
    messages: Parameters<ChatTokenizer["applyChatTemplate"]>[0],
    opts: Parameters<ChatTokenizer["applyChatTemplate"]>[1] & Record<string, unknown>,
  ): string;
  /** Tokens that end an assistant turn (e.g. <|im_end|>, <|endoftext|>). */
  readonly stopTokenIds: number[];
}

export interface ServedModel {
  /** The name clients put in `model`. */
  name: string;
  generator: Generator;
  tokenizer: HandlerTokenizer;
  /** Builds a constraint for JSON output (json_object when schema is null); absent = not supported. */
  jsonConstraint?: (schema: Record<string, unknown> | null) => () => TokenConstraint;
  /** Builds a constraint forcing one call among `tools` (or of the named one), for tool_choice required/named. */
  toolConstraint?: (tools: ChatRequest["tools"], name?: string) => () => TokenConstraint;
  created?: number;
}

export type Handler = (req: Request) => Promise<Response>;

export interface HandlerOptions {
  /** Looked up on every request, so models can be added (e.g. a new checkpoint) while serving. */
  models: () => ServedModel[];
}

/** Decodes tokens one at a time, holding back bytes of an incomplete UTF-8 character. */
class TextStream {
  private ids: number[] = [];
  private emitted = "";
  constructor(private tok: ChatTokenizer) {}
  push(id: number): string {
    this.ids.push(id);
    const text = this.tok.decode(this.ids, { skipSpecialTokens: true });
    if (text.endsWith("\uFFFD")) return "";
    const out = text.slice(this.emitted.length);
    this.emitted = text;
    return out;
  }
}

function newId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e9).toString(36)}`;
}

export function createHandler(opts: HandlerOptions): Handler {
  return async (req) => {
    try {
      const url = new URL(req.url, "http://localhost");
      const path = url.pathname.replace(/\/+$/, "");
      const modelObject = (m: ServedModel) => ({
        id: m.name,
        object: "model",
        created: m.created ?? 0,
        owned_by: "webart",
      });
      if (path.endsWith("/models") && req.method === "GET") {
        return jsonResponse({ object: "list", data: opts.models().map(modelObject) });
      }
      const one = /\/models\/([^/]+)$/.exec(path);
      if (one && req.method === "GET") {
        let id = one[1];
        try {
          id = decodeURIComponent(id);
        } catch {
          // Not valid percent-encoding: no model has that name, which the lookup says.
        }
        const model = opts.models().find((m) => m.name === id);
        if (!model) throw modelNotFound(id, opts.models());
        return jsonResponse(modelObject(model));
      }
      if (path.endsWith("/chat/completions")) {
        if (req.method !== "POST") throw new ApiError(405, `${req.method} is not allowed on ${path}; use POST`);
        let body: unknown;
        try {
          body = JSON.parse(await req.text());
        } catch (e) {
          throw badRequest(`the request body is not valid JSON: ${(e as Error).message}`);
        }
        const cr = parseChatRequest(body);
        const model = opts.models().find((m) => m.name === cr.model);
        if (!model) throw modelNotFound(cr.model, opts.models());
        return await chatCompletion(model, cr, req.signal);
      }
      throw new ApiError(404, `Unknown route ${req.method} ${path}`, null, "unknown_url");
    } catch (e) {
      return errorResponse(e);
    }
  };
}

const modelNotFound = (id: string, served: ServedModel[]) =>
  new ApiError(
    404,
    `The model \`${id}\` does not exist (available: ${served.map((m) => m.name).join(", ")})`,
    "model",
    "model_not_found",
  );

function buildPrompt(model: ServedModel, cr: ChatRequest): number[] {
  const tools = cr.tool_choice === "none" ? undefined : cr.tools.length ? cr.tools : undefined;
  let text: string;
  try {
    text = model.tokenizer.applyChatTemplate(cr.messages, {
      tools,
      addGenerationPrompt: true,
      ...cr.chat_template_kwargs,
    });
  } catch (e) {
    throw badRequest(`messages: the chat template failed to render: ${(e as Error).message}`, "messages");
  }
  return model.tokenizer.encode(text, { addSpecialTokens: false });
}

function constraintFor(model: ServedModel, cr: ChatRequest): (() => TokenConstraint) | undefined {
  const tc = cr.tool_choice;
  const forced = tc === "required" || typeof tc === "object";
  if (forced && cr.response_format.type !== "text") {
    throw badRequest("tool_choice that forces a call cannot be combined with a JSON response_format", "tool_choice");
  }
  try {
    if (forced) {
      if (!model.toolConstraint)
        throw badRequest(`tool_choice: forcing a call is not supported by model ${model.name}`, "tool_choice");
      return model.toolConstraint(cr.tools, typeof tc === "object" ? tc.function.name : undefined);
    }
    const rf = cr.response_format;
    if (rf.type === "text") return undefined;
    if (!model.jsonConstraint)
      throw badRequest(`response_format: ${rf.type} is not supported by model ${model.name}`, "response_format");
    return model.jsonConstraint(rf.type === "json_schema" ? (rf.json_schema.schema ?? {}) : null);
  } catch (e) {
    // Schema errors (an unsupported keyword, a bad $ref) are the client's: a 400 naming the keyword and path.
    if (e instanceof ApiError) throw e;
    throw badRequest(
      `${forced ? "tools" : "response_format"}: ${(e as Error).message}`,
      forced ? "tools" : "response_format",
    );
  }
}

/** OpenAI's usage object: the prompt counts once for all n choices. */
const usage = (r: GenerateResult, completion: number) => ({
  prompt_tokens: r.promptTokens,
  completion_tokens: completion,
  total_tokens: r.promptTokens + completion,
  prompt_tokens_details: { cached_tokens: r.cachedPromptTokens },
});

interface ChoiceState {
  text: string;
  stops: StopMatcher;
  stream: TextStream;
  logprobs: {
    token: string;
    logprob: number;
    bytes: number[];
    top_logprobs: { token: string; logprob: number; bytes: number[] }[];
  }[];
  /** Streaming: text already sent, and whether a tool call started (then text is held to the end). */
  sent: number;
  inTool: boolean;
}

async function chatCompletion(model: ServedModel, cr: ChatRequest, signal: AbortSignal | null): Promise<Response> {
  const promptIds = buildPrompt(model, cr);
  const ctx = model.generator.maxContext;
  if (promptIds.length >= ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens, but the messages have ${promptIds.length} tokens.`,
      "messages",
      "context_length_exceeded",
    );
  }
  const maxTokens = Math.min(cr.max_tokens ?? ctx - promptIds.length, ctx - promptIds.length);
  if (cr.max_tokens !== null && promptIds.length + cr.max_tokens > ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens. However, you requested ${promptIds.length + cr.max_tokens} tokens (${promptIds.length} in the messages, ${cr.max_tokens} in the completion).`,
      "max_tokens",
      "context_length_exceeded",
    );
  }
  const constraint = constraintFor(model, cr);
  const tok = model.tokenizer;
  const id = newId("chatcmpl");
  const created = Math.floor(Date.now() / 1000);
  const states: ChoiceState[] = Array.from({ length: cr.n }, () => ({
    text: "",
    stops: new StopMatcher(cr.stop),
    stream: new TextStream(tok),
    logprobs: [],
    sent: 0,
    inTool: false,
  }));
  const tokenText = (tid: number) => tok.decode([tid], { skipSpecialTokens: false });
  const bytes = (s: string) => [...new TextEncoder().encode(s)];
  let push: ((chunk: unknown) => void) | undefined;

  const onToken = (e: TokenEvent): boolean => {
    const st = states[e.sample];
    if (cr.logprobs) {
      const t = tokenText(e.tokenId);
      st.logprobs.push({
        token: t,
        logprob: e.logprob,
        bytes: bytes(t),
        top_logprobs: (e.top ?? []).slice(0, cr.top_logprobs).map((x) => {
          const s = tokenText(x.tokenId);
          return { token: s, logprob: x.logprob, bytes: bytes(s) };
        }),
      });
    }
    const piece = st.stops.push(st.stream.push(e.tokenId));
    st.text += piece;
    if (push && piece) {
      if (!st.inTool && cr.tools.length && st.text.includes(TOOL_OPEN)) st.inTool = true;
      if (!st.inTool) {
        push({
          index: e.sample,
          delta: { content: st.text.slice(st.sent) },
          logprobs: cr.logprobs ? { content: st.logprobs.slice(-1) } : null,
          finish_reason: null,
        });
        st.sent = st.text.length;
      }
    }
    return !st.stops.stopped;
  };

  const run = () =>
    model.generator.generate(
      {
        promptIds,
        n: cr.n,
        maxTokens,
        sampling: {
          temperature: cr.temperature,
          topP: cr.top_p,
          topK: cr.top_k,
          seed: cr.seed ?? Math.floor(Math.random() * 2 ** 31),
        },
        stopTokenIds: tok.stopTokenIds,
        topLogprobs: cr.logprobs ? cr.top_logprobs : 0,
        constraint,
        signal: signal ?? undefined,
      },
      onToken,
    );

  const finishChoice = (i: number, finish: string, tokenIds: number[], tokenLogprobs: number[]) => {
    const st = states[i];
    st.text += st.stops.flush();
    const parsed =
      cr.tools.length && cr.tool_choice !== "none" ? parseToolCalls(st.text) : { content: st.text, toolCalls: [] };
    const finishReason = parsed.toolCalls.length ? "tool_calls" : st.stops.stopped ? "stop" : finish;
    return { parsed, finishReason, tokenIds, tokenLogprobs };
  };

  if (!cr.stream) {
    const result = await run();
    const choices = result.samples.map((s, i) => {
      const f = finishChoice(i, s.finishReason === "abort" ? "stop" : s.finishReason, s.tokenIds, s.logprobs);
      return {
        index: i,
        message: {
          role: "assistant" as const,
          content: f.parsed.content,
          refusal: null,
          ...(f.parsed.toolCalls.length ? { tool_calls: f.parsed.toolCalls } : {}),
        },
        logprobs: cr.logprobs ? { content: states[i].logprobs, refusal: null } : null,
        finish_reason: f.finishReason,
        token_ids: s.tokenIds,
        token_logprobs: s.logprobs,
      };
    });
    const completion = choices.reduce((a, c) => a + c.token_ids.length, 0);
    return jsonResponse({
      id,
      object: "chat.completion",
      created,
      model: model.name,
      choices,
      usage: usage(result, completion),
    });
  }

  // Streaming: Server-Sent Events, one chunk per piece of text, [DONE] at the end.
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (obj: unknown) => controller.enqueue(enc.encode(`data: ${JSON.stringify(obj)}\n\n`));
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        send({ id, object: "chat.completion.chunk", created, model: model.name, choices, ...extra });
      push = (c) => chunk([c]);
      try {
        for (let i = 0; i < cr.n; i++)
          chunk([{ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
        const result = await run();
        let completion = 0;
        result.samples.forEach((s, i) => {
          completion += s.tokenIds.length;
          const f = finishChoice(i, s.finishReason === "abort" ? "stop" : s.finishReason, s.tokenIds, s.logprobs);
          const st = states[i];
          const delta: Record<string, unknown> = {};
          if (f.parsed.toolCalls.length) {
            const already = st.text.slice(0, st.sent);
            const content = f.parsed.content ?? "";
            if (content.length > already.length && content.startsWith(already))
              delta.content = content.slice(already.length);
            delta.tool_calls = f.parsed.toolCalls.map((tc, k) => ({ index: k, ...tc }));
          } else if (st.text.length > st.sent) {
            delta.content = st.text.slice(st.sent);
          }
          chunk([
            {
              index: i,
              delta,
              logprobs: null,
              finish_reason: f.finishReason,
              token_ids: s.tokenIds,
              token_logprobs: s.logprobs,
            },
          ]);
        });
        // As OpenAI: with stream_options.include_usage, a last chunk with no choices carries the usage.
        if (cr.include_usage) chunk([], { usage: usage(result, completion) });
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
      } catch (e) {
        const err = e instanceof ApiError ? e : new ApiError(500, (e as Error).message);
        controller.enqueue(enc.encode(`data: ${JSON.stringify(err.toJSON())}\n\n`));
      } finally {
        controller.close();
      }
    },
  });
  return new Response(body, {
    status: 200,
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" },
  });
}
