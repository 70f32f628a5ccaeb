import { expect, it } from "vitest";
import { EMAIL_TOOLS, emailSplitOf } from "../email/index.ts";
import { emailTranscripts } from "./email-transcripts.ts";

it("plays training inboxes into transcripts of legal tool calls, each result answering its call", async () => {
  const ts = await emailTranscripts({ episodes: 12, start: 5, perfect: 0.5, seed: 3 });
  expect(ts).toHaveLength(12);
  for (const { messages, tools } of ts) {
    expect(tools).toEqual(EMAIL_TOOLS);
    expect(messages.slice(0, 2).map((m) => m.role)).toEqual(["system", "user"]);
    let pending: string | null = null;
    for (const m of messages.slice(2)) {
      if (m.role === "assistant") {
        expect(pending).toBeNull();
        expect(m.tool_calls).toHaveLength(1);
        const call = m.tool_calls![0];
        expect(call.type).toBe("function");
        if (call.type !== "function") continue;
        expect(EMAIL_TOOLS.map((t) => t.function.name)).toContain(call.function.name);
        expect(() => JSON.parse(call.function.arguments)).not.toThrow();
        pending = call.function.name === "return_final_answer" ? null : call.id;
      } else {
        expect(m.role).toBe("tool");
        expect(m.role === "tool" && m.tool_call_id).toBe(pending);
        pending = null;
      }
    }
    const last = messages[messages.length - 1];
    expect(
      last.role === "assistant" && last.tool_calls?.[0].type === "function" && last.tool_calls[0].function.name,
    ).toBe("return_final_answer");
  }
  // The same options give the same transcripts; the inboxes are training ones.
  expect(await emailTranscripts({ episodes: 12, start: 5, perfect: 0.5, seed: 3 })).toEqual(ts);
  expect(ts.every((t) => emailSplitOf(t.seed) === "train")).toBe(true);
  expect(new Set(ts.map((t) => t.seed)).size).toBe(12);
});
