// A real `openai` client whose fetch answers /chat/completions from a scripted policy: for testing rollouts
// and demos without a model. It is a tiny fake server, not a mock of the SDK: requests and responses go
// through the SDK's own serialization and parsing.
import OpenAI from "openai";
import type { Message } from "./types.ts";

const encoder = new TextEncoder();
type CreateParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;

/** A reply that calls tools: each call's name and its arguments as the model would write them (a JSON string). */
export interface ScriptedReply {
  content?: string | null;
  toolCalls?: { name: string; arguments: string }[];
}

/** Gives the reply (its text, or content and tool calls) for a request; may throw to simulate a failing server (HTTP 500). */
export type ScriptedPolicy = (
  messages: Message[],
  request: CreateParams,
) => string | ScriptedReply | Promise<string | ScriptedReply>;

export interface ScriptedServer {
  client: OpenAI;
  /** Every request body received, in order. */
  requests: CreateParams[];
  /** The fake server's fetch, for a client of one's own (e.g. one that fails some requests). */
  fetch: (input: string | URL | Request, init?: RequestInit) => Promise<Response>;
}

export function scriptedOpenAI(policy: ScriptedPolicy): ScriptedServer {
  const requests: CreateParams[] = [];
  let counter = 0;
  const fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    if (!url.endsWith("/chat/completions") || init?.method !== "POST")
      return json(404, { error: { message: `scripted server: no route for ${init?.method} ${url}` } });
    const request = JSON.parse(String(init.body)) as CreateParams;
    requests.push(request);
    let reply: ScriptedReply;
    try {
      const r = await policy(request.messages, request);
      reply = typeof r === "string" ? { content: r } : r;
    } catch (e) {
      return json(500, { error: { message: String(e) } });
    }
    const n = ++counter;
    const toolCalls = (reply.toolCalls ?? []).map((c, i) => ({
      id: `call_scripted_${n}_${i}`,
      type: "function" as const,
      function: { name: c.name, arguments: c.arguments },
    }));
    const text = (reply.content ?? "") + (reply.toolCalls ?? []).map((c) => c.name + c.arguments).join("");
    const tokens = Array.from(text); // one "token" per character, logprob 0: enough for structure checks
    const completion: OpenAI.Chat.Completions.ChatCompletion = {
      id: `chatcmpl-scripted-${n}`,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model: request.model,
      choices: [
        {
          index: 0,
          finish_reason: toolCalls.length ? "tool_calls" : "stop",
          message: {
            role: "assistant",
            content: toolCalls.length ? (reply.content ?? null) : (reply.content ?? ""),
            refusal: null,
            ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
          },
          logprobs: request.logprobs
            ? {
                content: tokens.map((token) => ({
                  token,
                  logprob: 0,
                  bytes: [...encoder.encode(token)],
                  top_logprobs: [],
                })),
                refusal: null,
              }
            : null,
        },
      ],
      usage: { prompt_tokens: 0, completion_tokens: tokens.length, total_tokens: tokens.length },
    };
    return json(200, completion);
  };
  const client = new OpenAI({ apiKey: "x", baseURL: "http://127.0.0.1/v1", fetch, maxRetries: 0 });
  return { client, requests, fetch };
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}
