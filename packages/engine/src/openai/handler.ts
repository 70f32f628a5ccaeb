// The OpenAI-compatible request handler (Fetch API Request → Response): GET /v1/models[/{id}] and
// POST /v1/chat/completions with streaming, n, logprobs, tools and response_format. The in-process
// client, the Web Worker client and the HTTP server all mount this one handler.
import { encodeAllowed } from "../art/allowed.ts";
import type { ChatTokenizer } from "../art/tokenize.ts";
import { compileSchema, DEFAULT_LIMITS, JsonSchemaError } from "../constrain/schema.ts";
import { isFixedSchema } from "../constrain/tool.ts";
import type { GenerateResult, Generator, SampleResult, TokenConstraint, TokenEvent } from "../generate/types.ts";
import { ChoiceStream } from "./choice.ts";
import { ApiError, badRequest, errorResponse, jsonResponse } from "./errors.ts";
import { firstCallOnly, type ToolFormat } from "./tools.ts";
import { parseChatRequest, type ChatRequest } from "./validate.ts";

export interface HandlerTokenizer extends ChatTokenizer {
  applyChatTemplate(
    messages: Parameters<ChatTokenizer["applyChatTemplate"]>[0],
    opts: Parameters<ChatTokenizer["applyChatTemplate"]>[1] & Record<string, unknown>,
  ): string;
  /** Tokens that end an assistant turn (e.g. <|im_end|>, <|endoftext|>). */
  readonly stopTokenIds: number[];
  /** The bytes a token stands for (logprobs' `bytes`: part of a character when a token splits one). */
  tokenBytes?(id: number): Uint8Array | null;
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
  /** Builds a constraint to exactly one of `choices`, for vLLM's guided_choice. */
  choiceConstraint?: (choices: string[]) => () => TokenConstraint;
  /** How the model writes tool calls (from its chat template; default hermes). */
  toolFormat?: ToolFormat;
  created?: number;
}

export type Handler = (req: Request) => Promise<Response>;

export interface HandlerOptions {
  /** Looked up on every request, so models can be added (e.g. a new checkpoint) while serving. */
  models: () => ServedModel[];
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
    // The engine's tokenizer puts the messages in the form the template expects (templateMessages), as the
    // trainer's does, so a sampled turn is trained after the very prompt it was sampled from.
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

/** A named tool_choice whose tool in guided_tools has parameters that admit one value. */
function fixedCall(cr: ChatRequest): boolean {
  const tc = cr.tool_choice;
  if (typeof tc !== "object" || !cr.guided_tools) return false;
  const tool = cr.guided_tools.find((t) => (t as { function: { name: string } }).function.name === tc.function.name) as
    { function: { parameters?: unknown } } | undefined;
  return tool !== undefined && isFixedSchema(tool.function.parameters);
}

function constraintFor(model: ServedModel, cr: ChatRequest): (() => TokenConstraint) | undefined {
  const tc = cr.tool_choice;
  const forced = tc === "required" || typeof tc === "object";
  if (forced && cr.response_format.type !== "text") {
    throw badRequest("tool_choice that forces a call cannot be combined with a JSON response_format", "tool_choice");
  }
  if (cr.guided_choice) {
    if (forced || cr.response_format.type !== "text")
      throw badRequest(
        "guided_choice cannot be combined with a JSON response_format or a tool_choice that forces a call",
        "guided_choice",
      );
    if (!model.choiceConstraint)
      throw badRequest(`guided_choice: not supported by model ${model.name}`, "guided_choice");
    return model.choiceConstraint(cr.guided_choice);
  }
  try {
    if (forced) {
      if (!model.toolConstraint)
        throw badRequest(`tool_choice: forcing a call is not supported by model ${model.name}`, "tool_choice");
      const only = typeof tc === "object" ? tc.function.name : undefined;
      // guided_tools, where given, narrow the call; the prompt still shows tools.
      const [list, field] = cr.guided_tools ? [cr.guided_tools, "guided_tools"] : [cr.tools, "tools"];
      // Each tool that may be called on its own first, so that an error names the tool.
      list.forEach((tool, i) => {
        const fn = (tool as { function: { name: string; parameters?: Record<string, unknown> } }).function;
        if (only && fn.name !== only) return;
        try {
          compileSchema(fn.parameters ?? { type: "object" }, DEFAULT_LIMITS);
        } catch (e) {
          if (!(e instanceof JsonSchemaError)) throw e;
          throw badRequest(`${field}[${i}].function.parameters: ${e.message}`, field);
        }
      });
      return model.toolConstraint(list, only);
    }
    const rf = cr.response_format;
    if (rf.type === "text") {
      // parallel_tool_calls false: at most one call, then the end of the turn.
      if (!toolsParsed(cr) || cr.parallel_tool_calls) return undefined;
      const tok = model.tokenizer;
      const decode = (ids: number[]) => tok.decode(ids, { skipSpecialTokens: true });
      return firstCallOnly(model.toolFormat ?? "hermes", decode, tok.stopTokenIds, model.generator.vocabSize);
    }
    if (!model.jsonConstraint)
      throw badRequest(`response_format: ${rf.type} is not supported by model ${model.name}`, "response_format");
    return model.jsonConstraint(rf.type === "json_schema" ? (rf.json_schema.schema ?? {}) : null);
  } catch (e) {
    // Schema errors (an unsupported keyword, a bad $ref) are the client's: a 400 naming the keyword and path.
    if (e instanceof ApiError) throw e;
    throw badRequest(
      `${forced ? "tools" : "response_format.json_schema.schema"}: ${(e as Error).message}`,
      forced ? "tools" : "response_format",
    );
  }
}

/** Tool calls are parsed from the reply when tools may be called and the reply is not a JSON response_format. */
const toolsParsed = (cr: ChatRequest) =>
  cr.tools.length > 0 && cr.tool_choice !== "none" && cr.response_format.type === "text";

/** OpenAI's usage object: the prompt counts once for all n choices. */
const usage = (r: GenerateResult, completion: number) => ({
  prompt_tokens: r.promptTokens,
  completion_tokens: completion,
  total_tokens: r.promptTokens + completion,
  prompt_tokens_details: { cached_tokens: r.cachedPromptTokens },
});

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
  // A guided_choice of one string, or a named call whose guided_tools schema admits one value: the reply is forced,
  // not sampled (SampledChoice.forced).
  const forced = cr.guided_choice?.length === 1 || fixedCall(cr) ? { forced: true } : {};
  // The sets a constrained sample's tokens were drawn from (SampledChoice.token_allowed), so training takes each
  // token's logprob over its set; a forced reply is trained as forced instead.
  const allowedOf = (s: SampleResult) => {
    const a = forced.forced ? undefined : encodeAllowed(s.allowed);
    return a ? { token_allowed: a } : {};
  };
  const tok = model.tokenizer;
  const id = newId("chatcmpl");
  const created = Math.floor(Date.now() / 1000);
  const entry = (tid: number, logprob: number) => {
    const token = tok.decode([tid], { skipSpecialTokens: false });
    const b = tok.tokenBytes?.(tid) ?? new TextEncoder().encode(token);
    return { token, logprob, bytes: [...b] };
  };
  const logprob = (e: TokenEvent) => ({
    ...entry(e.tokenId, e.logprob),
    top_logprobs: (e.top ?? []).slice(0, cr.top_logprobs).map((x) => entry(x.tokenId, x.logprob)),
  });
  const choices = Array.from(
    { length: cr.n },
    () =>
      new ChoiceStream({
        decode: (ids) => tok.decode(ids, { skipSpecialTokens: true }),
        stop: cr.stop,
        tools: toolsParsed(cr) ? (model.toolFormat ?? "hermes") : null,
        maxCalls: cr.parallel_tool_calls ? Infinity : 1,
        logprob: cr.logprobs ? logprob : undefined,
      }),
  );
  const logprobsOf = (content: unknown[]) => (cr.logprobs ? { content, refusal: null } : null);
  let push: ((chunk: unknown) => void) | undefined;

  const onToken = (e: TokenEvent): boolean => {
    const c = choices[e.sample];
    const piece = c.push(e);
    if (push && piece)
      push({ index: e.sample, delta: piece.delta, logprobs: logprobsOf(piece.logprobs), finish_reason: null });
    return !c.stopped;
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

  /** Ends choice i: the last piece, and why it finished (a complete tool call says tool_calls). */
  const finishChoice = (i: number, finish: string) => {
    const c = choices[i];
    const last = c.end();
    const finishReason = c.toolCalls.length && !c.incompleteCall ? "tool_calls" : c.stopped ? "stop" : finish;
    return { last, finishReason };
  };

  if (!cr.stream) {
    const result = await run();
    const out = result.samples.map((s, i) => {
      const f = finishChoice(i, s.finishReason === "abort" ? "stop" : s.finishReason);
      const c = choices[i];
      return {
        index: i,
        message: {
          role: "assistant" as const,
          content: c.content,
          refusal: null,
          ...(c.toolCalls.length ? { tool_calls: c.toolCalls } : {}),
        },
        logprobs: logprobsOf(c.logprobs),
        finish_reason: f.finishReason,
        token_ids: s.tokenIds,
        token_logprobs: s.logprobs,
        ...forced,
        ...allowedOf(s),
      };
    });
    const completion = out.reduce((a, c) => a + c.token_ids.length, 0);
    return jsonResponse({
      id,
      object: "chat.completion",
      created,
      model: model.name,
      choices: out,
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
          const f = finishChoice(i, s.finishReason === "abort" ? "stop" : s.finishReason);
          chunk([
            {
              index: i,
              delta: f.last.delta,
              logprobs: logprobsOf(f.last.logprobs),
              finish_reason: f.finishReason,
              token_ids: s.tokenIds,
              token_logprobs: s.logprobs,
              ...forced,
              ...allowedOf(s),
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
