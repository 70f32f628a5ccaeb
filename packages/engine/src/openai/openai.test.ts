import { describe, expect, it } from "vitest";
import { StopMatcher } from "./stops.ts";
import { parseToolCalls } from "./tools.ts";
import { parseChatRequest } from "./validate.ts";

describe("tool call parsing", () => {
  it("turns Hermes <tool_call> blocks into OpenAI tool_calls and keeps the rest as content", () => {
    const r = parseToolCalls(
      'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    );
    expect(r.content).toBe("Let me check.");
    expect(r.toolCalls).toHaveLength(1);
    expect(r.toolCalls[0].function).toEqual({ name: "get_weather", arguments: '{"city":"Paris"}' });
    const only = parseToolCalls(
      '<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>{"name":"b","arguments":"{}"}</tool_call>',
    );
    expect(only.content).toBeNull();
    expect(only.toolCalls.map((t) => t.function.name)).toEqual(["a", "b"]);
    const bad = parseToolCalls("<tool_call>{not json}</tool_call>");
    expect(bad.toolCalls).toHaveLength(0);
    expect(bad.content).toBe("<tool_call>{not json}</tool_call>");
  });
});

describe("stop strings", () => {
  it("holds back a possible stop prefix and cuts at the first stop", () => {
    const m = new StopMatcher(["END", "\n\n"]);
    expect(m.push("hello E")).toBe("hello ");
    expect(m.push("N")).toBe("");
    expect(m.push("x more")).toBe("ENx more");
    expect(m.push(" then \n")).toBe(" then ");
    expect(m.push("\nafter")).toBe("");
    expect(m.stopped).toBe(true);
    const m2 = new StopMatcher(["STOP"]);
    expect(m2.push("abc ST")).toBe("abc ");
    expect(m2.flush()).toBe("ST");
  });
});

describe("request validation", () => {
  const base = { model: "m", messages: [{ role: "user", content: "hi" }] };
  it("takes guided_tools beside a forced call", () => {
    const r = parseChatRequest({ ...base, tools: [fnTool("f")], tool_choice: "required", guided_tools: [fnTool("f")] });
    expect(r.guided_tools).toEqual([fnTool("f")]);
    expect(parseChatRequest(base).guided_tools).toBeNull();
  });
  it("fills OpenAI's defaults", () => {
    const r = parseChatRequest(base);
    expect(r).toMatchObject({ temperature: 1, top_p: 1, n: 1, stream: false, tool_choice: "none", max_tokens: null });
    expect(r.parallel_tool_calls).toBe(true);
  });

  it("accepts what names or routes a request without changing the answer", () => {
    const extra = { user: "u", metadata: { a: "b" }, store: false, prompt_cache_key: "k", safety_identifier: "s" };
    expect(() => parseChatRequest({ ...base, ...extra, modalities: ["text"], logit_bias: null })).not.toThrow();
    expect(parseChatRequest({ ...base, parallel_tool_calls: false }).parallel_tool_calls).toBe(false);
  });
  it.each([
    [{ temperature: 3 }, /temperature: 3 is out of range/],
    [{ n: 0 }, /n: 0 is out of range/],
    [{ n: 1.5 }, /n: expected an integer/],
    [{ max_tokens: "10" }, /max_tokens: expected a number/],
    [{ top_logprobs: 3 }, /requires logprobs/],
    [{ messages: [] }, /messages: expected a non-empty array/],
    [{ messages: [{ role: "robot", content: "x" }] }, /messages\[0\]\.role/],
    [{ tools: [{ type: "function" }] }, /tools\[0\]/],
    [{ tool_choice: "required" }, /needs tools/],
    [{ response_format: { type: "xml" } }, /response_format.type/],
    [{ frobnicate: 1 }, /Unrecognized request argument supplied: frobnicate/],
    [{ logit_bias: { "42": 5 } }, /logit_bias: the sampler takes no per-token bias/],
    [{ functions: [{ name: "f" }] }, /functions: the legacy functions API is not supported; use tools/],
    [{ reasoning_effort: "low" }, /reasoning_effort: not supported; .*chat_template_kwargs/],
    [{ modalities: ["text", "audio"] }, /modalities: only \["text"\]/],
    [{ parallel_tool_calls: 1 }, /parallel_tool_calls: expected a boolean/],
    [{ stop: ["a", "b", "c", "d", "e"] }, /stop: up to 4/],
    [{ tools: [fnTool("f")], guided_tools: [fnTool("f")] }, /guided_tools: needs a tool_choice that forces a call/],
    [
      { tools: [fnTool("f")], tool_choice: "required", guided_tools: [fnTool("g")] },
      /no tool named "g" in tools \(f\)/,
    ],
    [{ tools: [fnTool("f")], tool_choice: "required", guided_tools: [] }, /guided_tools: expected a non-empty array/],
    [{ tools: [fnTool("f")], tool_choice: "required", guided_tools: [{ type: "function" }] }, /guided_tools\[0\]/],
  ])("rejects %j", (extra, msg) => {
    expect(() => parseChatRequest({ ...base, ...extra })).toThrow(msg);
  });
});

function fnTool(name: string) {
  return { type: "function", function: { name, parameters: { type: "object", properties: {} } } };
}
