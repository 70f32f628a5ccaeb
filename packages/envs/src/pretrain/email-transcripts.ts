// Tool-use transcripts for pretraining a model that can start on the email task: episodes on training-split inboxes
// played by scripted searchers through the rollout itself (rolloutEmail over a scripted openai server), so each
// conversation is exactly what a model is offered and writes: the system prompt, the question, the tool calls with
// their JSON arguments and the tool results, with the tools' definitions beside it.
import { Rng } from "@webart/gpu";
import { naiveSearcher, perfectSearcher } from "../email/baselines.ts";
import { emailScenario } from "../email/inbox.ts";
import { rolloutEmail } from "../email/rollout.ts";
import { scriptedOpenAI } from "../scripted.ts";
import { isChoice, type Message, type Tool } from "../types.ts";

export interface ToolTranscript {
  messages: Message[];
  tools: Tool[];
  /** The inbox's scenario seed (a training one). */
  seed: number;
}

export interface EmailTranscriptOptions {
  episodes: number;
  /** The first training scenario's index (episodes take the indices from here on). Default 0. */
  start?: number;
  /** Share of episodes played by the perfect searcher (the question's distinctive words); the rest by the naive
   *  one (its first content word, the newest result read, its closest sentence answered). Default 0. */
  perfect?: number;
  seed?: number;
}

/** Episodes of the email task as chat transcripts with their tools (assistant turns with their tool_calls). */
export async function emailTranscripts(opts: EmailTranscriptOptions): Promise<ToolTranscript[]> {
  const rng = new Rng(opts.seed ?? 1);
  const out: ToolTranscript[] = [];
  for (let i = 0; i < opts.episodes; i++) {
    const scenario = emailScenario("train", (opts.start ?? 0) + i);
    const policy = rng.next() < (opts.perfect ?? 0) ? perfectSearcher(scenario) : naiveSearcher();
    const t = await rolloutEmail(scriptedOpenAI(policy).client, {
      scenario,
      model: "script",
      temperature: 1,
      maxTokens: 200,
    });
    const messages = t.messagesAndChoices.map((m): Message => {
      if (!isChoice(m)) return m;
      const { content, tool_calls } = m.message;
      return tool_calls?.length
        ? { role: "assistant", content: content || null, tool_calls }
        : { role: "assistant", content: content ?? "" };
    });
    out.push({ messages, tools: t.tools ?? [], seed: scenario.seed });
  }
  return out;
}
