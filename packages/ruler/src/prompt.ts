// Builds the judge's request: the rubric, the conversation every trajectory shares (sent once),
// each trajectory's own messages under its id, the agent's tools, and the JSON schema of the answer.
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { ResponseFormatJSONSchema } from "openai/resources/shared";
import type { Message, Tool } from "@webart/engine";

/** What a good trajectory is, used when the caller gives no rubric of their own. */
export const DEFAULT_RUBRIC = [
  "- A trajectory that reaches the goal must score far above every trajectory that does not.",
  "- Between two trajectories that reach the goal, the one with fewer wasted steps, detours and errors scores higher.",
  "- Score gaps should track quality gaps: near-equal trajectories get near-equal scores, clearly better ones clearly more.",
  "- A trajectory that falls short can still earn partial credit for real progress toward the goal.",
].join("\n");

export function systemPrompt(rubric: string): string {
  return [
    "You are grading attempts by an AI agent. Every trajectory below was given the same goal and started from the " +
      "same conversation; work out the goal from that conversation itself (its system and user messages).",
    "Give each trajectory a score between 0 and 1. Scores are compared only within this group, so what matters " +
      "most is that the ranking and the size of the gaps between trajectories are right.",
    `Rubric:\n${rubric}`,
    'Answer with JSON only: {"scores": [{"trajectory_id": "<id>", "explanation": "<a sentence or two>", ' +
      '"score": <number between 0 and 1>}]}, with exactly one entry for every trajectory id. ' +
      "Write the explanation before the score.",
  ].join("\n\n");
}

/** Deep equality of JSON-like values (key order ignored), for comparing messages. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`).join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

/** Number of leading whole messages that are equal in every list. */
export function commonPrefixLength(lists: Message[][]): number {
  if (lists.length === 0) return 0;
  const keys = lists.map((l) => l.map(canonical));
  const shortest = Math.min(...keys.map((k) => k.length));
  let n = 0;
  while (n < shortest && keys.every((k) => k[n] === keys[0][n])) n++;
  return n;
}

export function allIdentical(lists: Message[][]): boolean {
  const first = canonical(lists[0]);
  return lists.every((l) => canonical(l) === first);
}

export interface JudgePrompt {
  messages: ChatCompletionMessageParam[];
  /** Ids the judge must score, each exactly once, in the order the trajectories were given. */
  ids: string[];
  /** Messages sent once as shared context (0 when there is none). */
  prefixLength: number;
}

/**
 * The judge's messages for `lists`, each already a plain message list. Callers send a single list
 * when every trajectory is identical (see ruler()); a lone trajectory is shown whole, without context.
 */
export function buildJudgePrompt(lists: Message[][], rubric: string, tools?: Tool[]): JudgePrompt {
  const ids = lists.map((_, i) => String(i + 1));
  const prefixLength = lists.length > 1 ? commonPrefixLength(lists) : 0;
  const parts: string[] = [];
  if (tools?.length) parts.push(`Tools the agent could call:\n<tools>\n${JSON.stringify(tools)}\n</tools>`);
  if (prefixLength > 0) {
    const shared = JSON.stringify(lists[0].slice(0, prefixLength));
    parts.push(
      `Conversation every trajectory starts with (shown once):\n<shared_context>\n${shared}\n</shared_context>`,
    );
  }
  parts.push(prefixLength > 0 ? "Trajectories (the messages after the shared context):" : "Trajectories:");
  lists.forEach((l, i) =>
    parts.push(`<trajectory id="${ids[i]}">\n${JSON.stringify(l.slice(prefixLength))}\n</trajectory>`),
  );
  return {
    messages: [
      { role: "system", content: systemPrompt(rubric) },
      { role: "user", content: parts.join("\n\n") },
    ],
    ids,
    prefixLength,
  };
}

/** The answer's schema for `response_format` (strict): ids are limited to the ones being judged. */
export function scoresResponseFormat(ids: string[]): ResponseFormatJSONSchema {
  return {
    type: "json_schema",
    json_schema: {
      name: "ruler_scores",
      strict: true,
      schema: {
        type: "object",
        properties: {
          scores: {
            type: "array",
            minItems: ids.length,
            maxItems: ids.length,
            items: {
              type: "object",
              properties: {
                trajectory_id: { type: "string", enum: ids },
                explanation: { type: "string", description: "Why this trajectory got its score, briefly." },
                score: { type: "number", description: "Between 0 and 1." },
              },
              required: ["trajectory_id", "explanation", "score"],
              additionalProperties: false,
            },
          },
        },
        required: ["scores"],
        additionalProperties: false,
      },
    },
  };
}
