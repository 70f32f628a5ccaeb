// Validates a chat-completions request body the way OpenAI does: wrong types and out-of-range
// values are 400 errors naming the parameter.
import { badRequest } from "./errors.ts";
import type { Message, Tool } from "../art/trajectories.ts";

export type ToolChoice = "none" | "auto" | "required" | { type: "function"; function: { name: string } };
export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; json_schema: { name: string; schema?: Record<string, unknown>; strict?: boolean } };

export interface ChatRequest {
  model: string;
  messages: Message[];
  temperature: number;
  top_p: number;
  top_k: number;
  n: number;
  max_tokens: number | null;
  stop: string[];
  seed: number | null;
  stream: boolean;
  include_usage: boolean;
  logprobs: boolean;
  top_logprobs: number;
  tools: Tool[];
  tool_choice: ToolChoice;
  /** false: at most one tool call in the reply. */
  parallel_tool_calls: boolean;
  response_format: ResponseFormat;
  /** Extra chat-template variables (e.g. enable_thinking), as vLLM's chat_template_kwargs. */
  chat_template_kwargs: Record<string, unknown>;
  /** vLLM's guided_choice: the reply is exactly one of these strings (null: no such constraint). */
  guided_choice: string[] | null;
  /**
   * webart's extension for forced calls (tool_choice "required" or a named tool): the call is constrained to these
   * tools' schemas, while `tools` is what the prompt shows. Same names as tools; narrower schemas (enums of the
   * values an agent may pass this turn). null: the constraint is `tools` itself.
   */
  guided_tools: Tool[] | null;
}

/** Accepted and ignored: they name or route a request but do not change its answer. */
const IGNORED = new Set([
  "user",
  "metadata",
  "store",
  "service_tier",
  "stream_options",
  "extra_body",
  "safety_identifier",
  "prompt_cache_key",
  "prompt_cache_retention",
  "prompt_cache_options",
]);

/** OpenAI parameters that would change the answer in ways this server cannot: refused, with what to do. */
const REFUSED: Record<string, string> = {
  logit_bias: "the sampler takes no per-token bias; use response_format or tools to constrain the output",
  functions: "the legacy functions API is not supported; use tools",
  function_call: "the legacy functions API is not supported; use tool_choice",
  audio: "only text output is supported",
  prediction: "predicted outputs are not supported",
  reasoning_effort:
    "not supported; for a model with a thinking switch use chat_template_kwargs (e.g. { enable_thinking: false })",
  verbosity: "not supported",
  web_search_options: "web search is not supported",
  moderation: "moderation is not supported",
};
const KNOWN = new Set([
  "model",
  "messages",
  "temperature",
  "top_p",
  "top_k",
  "n",
  "max_tokens",
  "max_completion_tokens",
  "stop",
  "seed",
  "stream",
  "logprobs",
  "top_logprobs",
  "tools",
  "tool_choice",
  "response_format",
  "presence_penalty",
  "frequency_penalty",
  "chat_template_kwargs",
  "guided_choice",
  "guided_tools",
  "parallel_tool_calls",
  ...IGNORED,
]);
const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function num(body: Record<string, unknown>, key: string, def: number, lo: number, hi: number, int = false): number {
  const v = body[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== "number" || !Number.isFinite(v))
    throw badRequest(`${key}: expected a number, got ${JSON.stringify(v)}`, key);
  if (int && !Number.isInteger(v)) throw badRequest(`${key}: expected an integer, got ${v}`, key);
  if (v < lo || v > hi) throw badRequest(`${key}: ${v} is out of range [${lo}, ${hi}]`, key);
  return v;
}

function bool(body: Record<string, unknown>, key: string): boolean {
  const v = body[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw badRequest(`${key}: expected a boolean, got ${JSON.stringify(v)}`, key);
  return v;
}

function contentText(c: unknown, param: string): string | null {
  if (c === null || c === undefined) return null;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) {
    return c
      .map((part, i) => {
        if (!isObj(part) || part.type !== "text" || typeof part.text !== "string") {
          throw badRequest(`${param}[${i}]: only text content parts are supported`, param);
        }
        return part.text;
      })
      .join("");
  }
  throw badRequest(`${param}: expected a string or an array of text parts`, param);
}

function messages(v: unknown): Message[] {
  if (!Array.isArray(v) || v.length === 0) throw badRequest("messages: expected a non-empty array", "messages");
  return v.map((m, i) => {
    const p = `messages[${i}]`;
    if (!isObj(m)) throw badRequest(`${p}: expected an object`, p);
    if (typeof m.role !== "string" || !ROLES.has(m.role)) {
      throw badRequest(`${p}.role: ${JSON.stringify(m.role)} is not one of ${[...ROLES].join(", ")}`, `${p}.role`);
    }
    const content = contentText(m.content, `${p}.content`);
    const out: Record<string, unknown> = { ...m, content: content ?? (m.role === "assistant" ? null : "") };
    if (m.role !== "assistant" && content === null)
      throw badRequest(`${p}.content: required for role ${m.role}`, `${p}.content`);
    if (m.tool_calls !== undefined) {
      if (m.role !== "assistant" || !Array.isArray(m.tool_calls))
        throw badRequest(`${p}.tool_calls: only assistant messages have an array of tool_calls`, `${p}.tool_calls`);
      m.tool_calls.forEach((tc, j) => {
        if (!isObj(tc) || !isObj(tc.function) || typeof tc.function.name !== "string") {
          throw badRequest(
            `${p}.tool_calls[${j}]: expected { type: "function", function: { name, arguments } }`,
            `${p}.tool_calls`,
          );
        }
      });
    }
    if (m.role === "tool" && typeof m.tool_call_id !== "string") {
      throw badRequest(`${p}.tool_call_id: required for role tool`, `${p}.tool_call_id`);
    }
    return out as unknown as Message;
  });
}

function tools(v: unknown, key = "tools"): Tool[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw badRequest(`${key}: expected an array`, key);
  return v.map((t, i) => {
    if (
      !isObj(t) ||
      t.type !== "function" ||
      !isObj(t.function) ||
      typeof t.function.name !== "string" ||
      !t.function.name
    ) {
      throw badRequest(
        `${key}[${i}]: expected { type: "function", function: { name, description?, parameters? } }`,
        key,
      );
    }
    if (t.function.parameters !== undefined && !isObj(t.function.parameters)) {
      throw badRequest(`${key}[${i}].function.parameters: expected a JSON schema object`, key);
    }
    return t as unknown as Tool;
  });
}

function toolChoice(v: unknown, toolList: Tool[]): ToolChoice {
  if (v === undefined || v === null) return toolList.length ? "auto" : "none";
  if (v === "none" || v === "auto" || v === "required") {
    if (v === "required" && !toolList.length) throw badRequest('tool_choice: "required" needs tools', "tool_choice");
    return v;
  }
  if (isObj(v) && v.type === "function" && isObj(v.function) && typeof v.function.name === "string") {
    const name = v.function.name;
    if (!toolList.some((t) => (t as { function: { name: string } }).function.name === name)) {
      throw badRequest(`tool_choice: no tool named "${name}" in tools`, "tool_choice");
    }
    return { type: "function", function: { name } };
  }
  throw badRequest(
    `tool_choice: expected "none", "auto", "required" or { type: "function", function: { name } }`,
    "tool_choice",
  );
}

function responseFormat(v: unknown): ResponseFormat {
  if (v === undefined || v === null) return { type: "text" };
  if (!isObj(v)) throw badRequest("response_format: expected an object", "response_format");
  if (v.type === "text" || v.type === "json_object") return { type: v.type };
  if (v.type === "json_schema") {
    const js = v.json_schema;
    if (!isObj(js) || typeof js.name !== "string")
      throw badRequest("response_format.json_schema: expected { name, schema }", "response_format");
    if (js.schema !== undefined && !isObj(js.schema))
      throw badRequest("response_format.json_schema.schema: expected an object", "response_format");
    return { type: "json_schema", json_schema: js as { name: string; schema?: Record<string, unknown> } };
  }
  throw badRequest(
    `response_format.type: ${JSON.stringify(v.type)} is not one of text, json_object, json_schema`,
    "response_format",
  );
}

export function parseChatRequest(body: unknown): ChatRequest {
  if (!isObj(body)) throw badRequest("the request body must be a JSON object");
  for (const k of Object.keys(body)) {
    if (k === "modalities" && JSON.stringify(body[k]) === '["text"]') continue;
    if (k === "modalities") throw badRequest(`modalities: only ["text"] is supported`, k);
    if (Object.hasOwn(REFUSED, k) && body[k] !== null) throw badRequest(`${k}: ${REFUSED[k]}`, k);
    if (!KNOWN.has(k) && !Object.hasOwn(REFUSED, k))
      throw badRequest(`Unrecognized request argument supplied: ${k}`, k);
  }
  if (typeof body.model !== "string" || !body.model) throw badRequest("model: required string", "model");
  for (const k of ["presence_penalty", "frequency_penalty"]) {
    if (body[k] !== undefined && body[k] !== 0 && body[k] !== null) throw badRequest(`${k}: not supported (only 0)`, k);
  }
  const logprobs = bool(body, "logprobs");
  const top_logprobs = num(body, "top_logprobs", 0, 0, 20, true);
  if (top_logprobs > 0 && !logprobs) throw badRequest("top_logprobs: requires logprobs to be true", "top_logprobs");
  let stop: string[] = [];
  if (typeof body.stop === "string") stop = [body.stop];
  else if (Array.isArray(body.stop)) {
    if (body.stop.length > 4 || body.stop.some((s) => typeof s !== "string" || !s))
      throw badRequest("stop: up to 4 non-empty strings", "stop");
    stop = body.stop as string[];
  } else if (body.stop !== undefined && body.stop !== null)
    throw badRequest("stop: expected a string or an array of strings", "stop");
  const mt = body.max_completion_tokens ?? body.max_tokens;
  const maxKey = body.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens";
  const toolList = tools(body.tools);
  const tool_choice = toolChoice(body.tool_choice, toolList);
  const so = body.stream_options;
  const ctk = body.chat_template_kwargs;
  if (ctk !== undefined && !isObj(ctk))
    throw badRequest("chat_template_kwargs: expected an object", "chat_template_kwargs");
  return {
    model: body.model,
    messages: messages(body.messages),
    temperature: num(body, "temperature", 1, 0, 2),
    top_p: num(body, "top_p", 1, Number.MIN_VALUE, 1),
    top_k: num(body, "top_k", 0, 0, 1_000_000, true),
    n: num(body, "n", 1, 1, 64, true),
    max_tokens: mt === undefined || mt === null ? null : num({ [maxKey]: mt }, maxKey, 16, 1, 1_000_000, true),
    stop,
    seed: body.seed === undefined || body.seed === null ? null : num(body, "seed", 0, -(2 ** 53), 2 ** 53, true),
    stream: bool(body, "stream"),
    include_usage: isObj(so) && so.include_usage === true,
    logprobs,
    top_logprobs,
    tools: toolList,
    tool_choice,
    parallel_tool_calls:
      body.parallel_tool_calls === undefined || body.parallel_tool_calls === null || bool(body, "parallel_tool_calls"),
    response_format: responseFormat(body.response_format),
    chat_template_kwargs: (ctk as Record<string, unknown>) ?? {},
    guided_choice: guidedChoice(body.guided_choice),
    guided_tools: guidedTools(body.guided_tools, toolList, tool_choice),
  };
}

/** guided_tools: function tools named as in `tools`, for a request whose tool_choice forces a call. */
function guidedTools(v: unknown, toolList: Tool[], choice: ToolChoice): Tool[] | null {
  if (v === undefined || v === null) return null;
  if (choice !== "required" && typeof choice !== "object")
    throw badRequest(
      'guided_tools: needs a tool_choice that forces a call ("required" or a named tool)',
      "guided_tools",
    );
  const list = tools(v, "guided_tools");
  if (!list.length) throw badRequest("guided_tools: expected a non-empty array of tools", "guided_tools");
  const names = new Set(toolList.map((t) => (t as { function: { name: string } }).function.name));
  for (const t of list) {
    const name = (t as { function: { name: string } }).function.name;
    if (!names.has(name))
      throw badRequest(`guided_tools: no tool named "${name}" in tools (${[...names].join(", ")})`, "guided_tools");
  }
  if (
    typeof choice === "object" &&
    !list.some((t) => (t as { function: { name: string } }).function.name === choice.function.name)
  )
    throw badRequest(
      `guided_tools: the tool_choice names "${choice.function.name}", which guided_tools leaves out`,
      "guided_tools",
    );
  return list;
}

/** vLLM's guided_choice: a non-empty array of non-empty strings (null or absent: none). */
function guidedChoice(v: unknown): string[] | null {
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.length === 0 || v.some((c) => typeof c !== "string" || c.length === 0))
    throw badRequest(
      `guided_choice: expected a non-empty array of non-empty strings, got ${JSON.stringify(v)}`,
      "guided_choice",
    );
  return v as string[];
}
