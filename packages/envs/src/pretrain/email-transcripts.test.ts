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

it("slips: a garbled search or read, kept as context but not trained, and then the right call", async () => {
  const ts = await emailTranscripts({ episodes: 24, perfect: 1, slip: 1, seed: 5 });
  type M = (typeof ts)[number]["messages"][number];
  const fn = (m: M) =>
    m.role === "assistant" && m.tool_calls?.[0].type === "function" ? m.tool_calls[0].function : null;
  const kinds = { emptySearch: 0, search: 0, read: 0 };
  for (const t of ts) {
    const at = t.untrained![0];
    expect(t.untrained).toHaveLength(1);
    const slip = fn(t.messages[at])!;
    const next = fn(t.messages[at + 2])!;
    if (at === 2) {
      expect(slip.name).toBe("search_inbox");
      if (t.messages[3].content === "[]") {
        // The perfect searcher's own search follows, a different one.
        kinds.emptySearch++;
        expect(next.name).toBe("search_inbox");
        expect(next.arguments).not.toBe(slip.arguments);
      } else {
        kinds.search++;
        expect(next.name).toBe("read_email");
      }
    } else {
      // A read of an id that is not there: an error, then the read of the first result.
      kinds.read++;
      expect(at).toBe(4);
      expect(slip.name).toBe("read_email");
      expect(String(t.messages[5].content)).toMatch(/no such email/);
      expect(next.name).toBe("read_email");
      expect(next.arguments).not.toBe(slip.arguments);
    }
    expect(fn(t.messages[t.messages.length - 1])!.name).toBe("return_final_answer");
  }
  expect(kinds.emptySearch).toBeGreaterThan(4);
  expect(kinds.read).toBeGreaterThan(4);
  // Without slips nothing is left untrained.
  expect((await emailTranscripts({ episodes: 4, perfect: 1, seed: 5 })).every((t) => !t.untrained)).toBe(true);
});

it("sender false: the perfect searcher's searches, slips included, name no sender; by default they do", async () => {
  const searches = async (sender?: boolean) =>
    (
      await emailTranscripts({
        episodes: 30,
        perfect: 1,
        slip: 0.5,
        seed: 7,
        ...(sender === undefined ? {} : { sender }),
      })
    )
      .flatMap((t) => t.messages)
      .flatMap((m) =>
        m.role === "assistant" &&
        m.tool_calls?.[0].type === "function" &&
        m.tool_calls[0].function.name === "search_inbox"
          ? [JSON.parse(m.tool_calls[0].function.arguments) as { keywords: string[]; from?: string }]
          : [],
      );
  const without = await searches(false);
  expect(without.length).toBeGreaterThanOrEqual(30);
  expect(without.every((a) => a.from === undefined && a.keywords.length > 0)).toBe(true);
  expect((await searches()).some((a) => a.from !== undefined)).toBe(true);
});
