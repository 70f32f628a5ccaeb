// Turns a trajectory's history into training tokens: the chat template is rendered with each sampled
// assistant turn replaced by a sentinel, and each sentinel by the exact token ids the sampler produced
// (no re-tokenisation drift). Only those ids are trained (mask 1); everything else is context.
import { isChoice, isTrainableChoice, type History, type Message, type Tool } from "./trajectories.ts";

/** What tokenisation needs from a tokenizer (the engine's Tokenizer implements it). */
export interface ChatTokenizer {
  applyChatTemplate(messages: Message[], opts: { tools?: Tool[]; addGenerationPrompt?: boolean }): string;
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode(ids: number[], opts?: { skipSpecialTokens?: boolean }): string;
}

export interface TokenizedHistory {
  ids: number[];
  /** 1 where the token was sampled (trained), 0 for context. */
  mask: Uint8Array;
  /** The sampler's logprob for masked tokens (NaN elsewhere). */
  oldLogprobs: Float32Array;
  trainableTokens: number;
}

const SENTINEL = (i: number) => `\u0001webart-sampled-turn-${i}\u0001`;

export function tokenizeHistory(tok: ChatTokenizer, h: History): TokenizedHistory | null {
  // ART cuts the history after the last trainable assistant turn.
  let last = -1;
  h.messagesAndChoices.forEach((m, i) => {
    if (isTrainableChoice(m)) last = i;
  });
  if (last < 0) return null;
  const items = h.messagesAndChoices.slice(0, last + 1);
  const sampled: { ids: number[]; logprobs: number[] }[] = [];
  const messages: Message[] = items.map((m) => {
    if (!isChoice(m)) return m;
    if (!isTrainableChoice(m)) {
      // A Choice without sampler ids (e.g. from another provider) is context, like a plain message.
      return { role: "assistant", content: m.message.content ?? "" };
    }
    const idx = sampled.length;
    sampled.push({ ids: m.token_ids!, logprobs: m.token_logprobs! });
    const msg: Message = { role: "assistant", content: SENTINEL(idx) };
    if (m.message.tool_calls?.length) {
      // Tool calls are part of the sampled text, which the sentinel already stands for.
      (msg as { tool_calls?: unknown }).tool_calls = undefined;
    }
    return msg;
  });
  const text = tok.applyChatTemplate(messages, { tools: h.tools, addGenerationPrompt: false });
  const ids: number[] = [];
  const mask: number[] = [];
  const old: number[] = [];
  let rest = text;
  for (let i = 0; i < sampled.length; i++) {
    const s = SENTINEL(i);
    const at = rest.indexOf(s);
    if (at < 0) throw new Error(`tokenize: the chat template dropped assistant turn ${i}; cannot place its sampled tokens`);
    const before = tok.encode(rest.slice(0, at), { addSpecialTokens: false });
    for (const id of before) {
      ids.push(id);
      mask.push(0);
      old.push(NaN);
    }
    for (let k = 0; k < sampled[i].ids.length; k++) {
      ids.push(sampled[i].ids[k]);
      mask.push(1);
      old.push(sampled[i].logprobs[k]);
    }
    rest = rest.slice(at + s.length);
    // The sampler's ids end with the stop token when it stopped there; the template adds it again.
    const lastId = sampled[i].ids[sampled[i].ids.length - 1];
    const stop = tok.decode([lastId], { skipSpecialTokens: false });
    const isSpecial = tok.decode([lastId], { skipSpecialTokens: true }) === "";
    if (isSpecial && stop && rest.startsWith(stop)) rest = rest.slice(stop.length);
  }
  // The trailing part after the last trained turn (end-of-turn markers) is cut, as in ART.
  return {
    ids,
    mask: Uint8Array.from(mask),
    oldLogprobs: Float32Array.from(old),
    trainableTokens: mask.reduce((a, b) => a + b, 0),
  };
}

