// Turns a trajectory's history into training tokens that match what the sampler saw. Each sampled
// assistant turn's context is the chat template rendered up to that turn with the generation prompt
// (exactly the engine's prompt for that request), followed by the turn's exact sampled token ids (no
// re-tokenisation drift); those ids are trained (mask 1), everything else is context. Turns whose
// context extends the previous sequence share one sequence; when a template re-renders earlier turns
// differently (e.g. Qwen3 dropping old reasoning), the turn starts a new sequence in its own context.
import { decodeAllowed } from "./allowed.ts";
import { choiceToMessage, isChoice, isTrainableChoice, type History, type Message, type Tool } from "./trajectories.ts";

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
  /**
   * 1 on the tokens of assistant turns in the context that this model did not sample (plain assistant messages: a
   * scripted opening, few-shot turns), through their end-of-turn token; 0 elsewhere. Never trained by the policy
   * loss; with TrainConfig.anchorContextTurns the KL term holds them to the base model. Only when asked for.
   */
  anchor?: Uint8Array;
  /** 1 on the tokens of forced choices (SampledChoice.forced: trained, but out of the KL term); absent if none. */
  forced?: Uint8Array;
  /**
   * Per position, the set a constrained sampler drew its token from (SampledChoice.token_allowed, a vocabulary
   * bitmask), null elsewhere; absent if no choice has one.
   */
  allowed?: (Uint32Array | null)[];
}

interface Building {
  ids: number[];
  mask: number[];
  old: number[];
  forced: number[];
  allowed: (Uint32Array | null)[];
}

function finish(b: Building, spans: Span[] | undefined): TokenizedHistory {
  const out: TokenizedHistory = {
    ids: b.ids,
    mask: Uint8Array.from(b.mask),
    oldLogprobs: Float32Array.from(b.old),
    trainableTokens: b.mask.reduce((a, x) => a + x, 0),
    ...(b.forced.some((x) => x) ? { forced: Uint8Array.from(b.forced) } : {}),
    ...(b.allowed.some((x) => x) ? { allowed: b.allowed } : {}),
  };
  if (!spans) return out;
  const anchor = new Uint8Array(b.ids.length);
  // A span counts only where the sequence holds the same tokens from its start (a sequence starts at the
  // template's start; a later one may render earlier turns differently).
  for (const { start, ids } of spans)
    if (ids.length <= b.ids.length && ids.every((id, k) => b.ids[k] === id)) anchor.fill(1, start, ids.length);
  for (let k = 0; k < anchor.length; k++) if (b.mask[k]) anchor[k] = 0;
  return { ...out, anchor };
}

/**
 * Where assistant message j sits in the rendered conversation: the prompt that precedes it (the template up to it,
 * with the generation prompt) and the template rendered through it; null when that rendering does not extend the
 * prompt's tokens (a template that renders the turn differently from its own prompt).
 */
function turnTokens(
  tok: ChatTokenizer,
  messages: Message[],
  j: number,
  tools: Tool[] | undefined,
): { before: number[]; through: number[] } | null {
  const before = promptIds(tok, messages, j, tools);
  const through = tok.encode(tok.applyChatTemplate(messages.slice(0, j + 1), { tools }), { addSpecialTokens: false });
  return through.length > before.length && before.every((id, k) => through[k] === id) ? { before, through } : null;
}

/** Where each plain assistant message's turn sits (turnTokens); a turn the template renders otherwise is left out. */
function contextTurnSpans(tok: ChatTokenizer, messages: Message[], h: History): Span[] {
  const spans: Span[] = [];
  h.messagesAndChoices.forEach((m, j) => {
    if (isChoice(m) || (m as Message).role !== "assistant") return;
    const t = turnTokens(tok, messages, j, h.tools);
    if (t) spans.push({ start: t.before.length, ids: t.through });
  });
  return spans;
}

/** A context turn: its first token's position, and the template's tokens through its end. */
interface Span {
  start: number;
  ids: number[];
}

/** The prompt the engine saw for turn i of a history: the chat template up to it with the generation prompt. */
export function promptIds(tok: ChatTokenizer, messages: Message[], i: number, tools: Tool[] | undefined): number[] {
  return tok.encode(tok.applyChatTemplate(messages.slice(0, i), { tools, addGenerationPrompt: true }), {
    addSpecialTokens: false,
  });
}

/** The training sequences of one history (usually one; empty when nothing in it was sampled here). */
export function tokenizeHistory(
  tok: ChatTokenizer,
  h: History,
  opts: { /** Also mark the context turns the model did not sample (`anchor`). */ anchors?: boolean } = {},
): TokenizedHistory[] {
  const out: TokenizedHistory[] = [];
  const messages: Message[] = h.messagesAndChoices.map((m) => (isChoice(m) ? choiceToMessage(m) : m));
  let cur: Building | null = null;
  const spans = opts.anchors ? contextTurnSpans(tok, messages, h) : undefined;
  h.messagesAndChoices.forEach((m, i) => {
    if (!isTrainableChoice(m) || !isChoice(m)) return;
    const ctx = promptIds(tok, messages, i, h.tools);
    const extends_ = cur !== null && ctx.length >= cur.ids.length && cur.ids.every((id, k) => ctx[k] === id);
    if (!extends_) {
      if (cur) out.push(finish(cur, spans));
      cur = { ids: [], mask: [], old: [], forced: [], allowed: [] };
    }
    const b = cur!;
    for (let k = b.ids.length; k < ctx.length; k++) {
      b.ids.push(ctx[k]);
      b.mask.push(0);
      b.old.push(NaN);
      b.forced.push(0);
      b.allowed.push(null);
    }
    const sets = m.token_allowed ? decodeAllowed(m.token_allowed, m.token_ids!.length, `choice ${i}`) : undefined;
    m.token_ids!.forEach((id, k) => {
      b.ids.push(id);
      b.mask.push(1);
      b.old.push(m.token_logprobs![k]);
      b.forced.push(m.forced ? 1 : 0);
      b.allowed.push(sets?.[k] ?? null);
    });
  });
  if (cur) out.push(finish(cur, spans));
  return out;
}

/** Which assistant turns of a conversation supervised fine-tuning trains (ART's TrainSFTConfig.assistant_turns). */
export type SftTurns = "all" | "last";

/** A supervised sequence: the conversation's tokens, 1 on the assistant turns trained. */
export interface SupervisedSequence {
  ids: number[];
  mask: Uint8Array;
  trainableTokens: number;
}

/**
 * The supervised sequences of one history: every assistant turn (a Choice or a plain assistant message; with
 * "last", the last one alone) is trained on its tokens as the chat template renders them, from the end of the
 * prompt that precedes it (the template up to it, with the generation prompt) through its last stop token (one
 * of `stop`: the end of turn, so the model learns to stop; what the template puts after it, such as a newline,
 * is the next turn's context, which the model never generates). Turns whose prompt extends the sequence so far
 * share it; a template that re-renders earlier turns (Qwen3 dropping old reasoning) starts a new sequence in that
 * turn's own context. An assistant message with `weight: 0` (OpenAI's fine-tuning format) is context, not
 * trained. A history without an assistant turn to train gives none. `where` names the history in errors.
 */
export function tokenizeSft(
  tok: ChatTokenizer,
  h: History,
  turns: SftTurns,
  stop: readonly number[],
  where: string,
): SupervisedSequence[] {
  const messages: Message[] = h.messagesAndChoices.map((m) => (isChoice(m) ? choiceToMessage(m) : m));
  let trained = messages.flatMap((m, j) =>
    m.role === "assistant" && (m as { weight?: unknown }).weight !== 0 ? [j] : [],
  );
  if (turns === "last") trained = trained.slice(-1);
  const out: { ids: number[]; mask: number[] }[] = [];
  let cur: { ids: number[]; mask: number[] } | undefined;
  for (const j of trained) {
    const t = turnTokens(tok, messages, j, h.tools);
    if (!t)
      throw new Error(
        `${where}: the chat template renders message ${j} (assistant) so that it does not follow its own prompt ` +
          `(the conversation before it with the generation prompt), so its tokens cannot be told apart; ` +
          `check the message's content and tool_calls`,
      );
    const { before, through } = t;
    let end = through.length;
    while (end > before.length && !stop.includes(through[end - 1])) end--;
    if (end === before.length) end = through.length; // no stop token in the turn: all of it
    if (!(cur && cur.ids.length <= through.length && cur.ids.every((id, k) => through[k] === id))) {
      cur = { ids: [], mask: [] };
      out.push(cur);
    }
    for (let k = cur.ids.length; k < through.length; k++) {
      cur.ids.push(through[k]);
      cur.mask.push(k >= before.length && k < end ? 1 : 0);
    }
  }
  return out.map((s) => {
    const mask = Uint8Array.from(s.mask);
    return { ids: s.ids, mask, trainableTokens: mask.reduce((a, x) => a + x, 0) };
  });
}
