// An `openai` SDK client whose fetch goes straight to a handler: in-process in Node or in a worker,
// or to a handler behind a Web Worker boundary (any function with fetch's shape).
import OpenAI from "openai";
import type { Handler } from "./handler.ts";

export const LOCAL_BASE_URL = "http://webart.local/v1";

export function clientForHandler(handler: Handler, opts: { baseURL?: string; timeoutMs?: number } = {}): OpenAI {
  return new OpenAI({
    apiKey: "webart-local",
    baseURL: opts.baseURL ?? LOCAL_BASE_URL,
    timeout: opts.timeoutMs ?? 20 * 60 * 1000,
    maxRetries: 0,
    dangerouslyAllowBrowser: true,
    fetch: async (input: string | URL | Request, init?: RequestInit) => handler(new Request(input, init)),
  });
}
