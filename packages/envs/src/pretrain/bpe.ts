// A small byte-level BPE trainer (GPT-2 style bytes-as-characters, a split regex, merges learned by pair
// frequency) and the encoder it implies, for the embedded model's tokenizer. Special tokens are never merged.

/** Pre-tokenization: words with one leading space, digit runs, single punctuation marks, whitespace runs.
 * Punctuation stays one mark per piece so board cells (`|`, `_`, `.`) remain separate tokens. Written for
 * both JS and the Oniguruma engine of HF tokenizers (same meaning in both). */
export const SPLIT_PATTERN = String.raw` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]|\s+(?!\S)|\s+`;
/** The same with every digit a piece of its own (as Qwen's tokenizers split numbers): "m2762" is always m|2|7|6|2,
 *  so a model copies an id digit by digit, where digit-run merges cut each id differently (m|27|62, m|3|9|6|9). */
export const SPLIT_PATTERN_DIGITS = String.raw` ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]|\s+(?!\S)|\s+`;
const regexes = new Map<string, RegExp>();
const splitRegexOf = (pattern: string) => {
  let r = regexes.get(pattern);
  if (!r) regexes.set(pattern, (r = new RegExp(pattern, "gu")));
  return r;
};

export interface BpeOptions {
  /** Vocabulary size including the special tokens; training stops earlier when no pair repeats. */
  vocabSize: number;
  /** Added tokens, matched before pre-tokenization and never split; ids follow the learned tokens. */
  specialTokens: string[];
  /** A pair must occur at least this often to be merged; default 2. */
  minFrequency?: number;
  /** Every digit its own piece (SPLIT_PATTERN_DIGITS); default false (digit runs). */
  splitDigits?: boolean;
}

export interface BpeTokenizer {
  /** Token string (bytes mapped to characters) -> id; the 256 bytes first, then one token per merge. */
  vocab: Map<string, number>;
  merges: [string, string][];
  specialTokens: { id: number; content: string }[];
  /** The pre-tokenization regex (SPLIT_PATTERN when absent). */
  splitPattern?: string;
}

/** GPT-2's reversible map from bytes to printable characters (so a token is a plain string). */
export const BYTE_TO_CHAR: string[] = (() => {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  let extra = 0;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : 256 + extra++));
})();

const utf8 = new TextEncoder();

/** GPT-2 byte-level form of a string: its UTF-8 bytes as characters. */
export function byteLevel(s: string): string {
  let out = "";
  for (const b of utf8.encode(s)) out += BYTE_TO_CHAR[b];
  return out;
}

/** Pieces of text: special tokens whole (as `{ special }`), the rest split by SPLIT_PATTERN (not yet byte-level). */
export function pretokenize(
  text: string,
  specialTokens: readonly string[],
  pattern = SPLIT_PATTERN,
): (string | { special: string })[] {
  const out: (string | { special: string })[] = [];
  const splitRegex = splitRegexOf(pattern);
  const pushWords = (s: string) => {
    for (const m of s.matchAll(splitRegex)) out.push(m[0]);
  };
  if (specialTokens.length === 0) {
    pushWords(text);
    return out;
  }
  // Longest first, so a special token that is a prefix of another never wins.
  const escaped = [...specialTokens]
    .sort((a, b) => b.length - a.length)
    .map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  let start = 0;
  for (const m of text.matchAll(new RegExp(escaped.join("|"), "g"))) {
    pushWords(text.slice(start, m.index));
    out.push({ special: m[0] });
    start = m.index + m[0].length;
  }
  pushWords(text.slice(start));
  return out;
}

export function trainBpe(texts: Iterable<string>, opts: BpeOptions): BpeTokenizer {
  const minFrequency = opts.minFrequency ?? 2;
  const target = opts.vocabSize - opts.specialTokens.length;
  if (target < 256) throw new Error(`trainBpe: vocabSize ${opts.vocabSize} leaves no room for the 256 bytes`);

  // Unique words with their counts, each as a list of token ids.
  const splitPattern = opts.splitDigits ? SPLIT_PATTERN_DIGITS : SPLIT_PATTERN;
  const wordCounts = new Map<string, number>();
  for (const text of texts)
    for (const p of pretokenize(text, opts.specialTokens, splitPattern))
      if (typeof p === "string") wordCounts.set(p, (wordCounts.get(p) ?? 0) + 1);
  const words = [...wordCounts.keys()].map((w) => Array.from(utf8.encode(w))); // byte b has token id b
  const freqs = [...wordCounts.values()];
  const tokens = [...BYTE_TO_CHAR];

  // Pair counts and, per pair, the words containing it; a pair (a, b) is keyed a * 65536 + b.
  const pairCount = new Map<number, number>();
  const pairWords = new Map<number, Set<number>>();
  const addPairs = (w: number, sign: number) => {
    const s = words[w];
    for (let i = 0; i + 1 < s.length; i++) {
      const k = s[i] * 65536 + s[i + 1];
      const c = (pairCount.get(k) ?? 0) + sign * freqs[w];
      if (c > 0) pairCount.set(k, c);
      else pairCount.delete(k);
      if (sign > 0) {
        let set = pairWords.get(k);
        if (!set) pairWords.set(k, (set = new Set()));
        set.add(w);
      }
    }
  };
  words.forEach((_, w) => addPairs(w, 1));

  const merges: [string, string][] = [];
  while (tokens.length < target) {
    let best = -1;
    let bestCount = minFrequency - 1;
    for (const [k, c] of pairCount)
      if (c > bestCount || (c === bestCount && best >= 0 && k < best)) [best, bestCount] = [k, c];
    if (best < 0) break;
    const a = Math.floor(best / 65536);
    const b = best % 65536;
    const id = tokens.length;
    tokens.push(tokens[a] + tokens[b]);
    merges.push([tokens[a], tokens[b]]);
    for (const w of pairWords.get(best) ?? []) {
      addPairs(w, -1);
      const s = words[w];
      const merged: number[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) {
          merged.push(id);
          i++;
        } else merged.push(s[i]);
      }
      words[w] = merged;
      addPairs(w, 1);
    }
    pairWords.delete(best);
    pairCount.delete(best);
  }
  return {
    vocab: new Map(tokens.map((t, i) => [t, i])),
    merges,
    specialTokens: opts.specialTokens.map((content, i) => ({ id: tokens.length + i, content })),
    ...(opts.splitDigits ? { splitPattern } : {}),
  };
}

const ranks = new WeakMap<BpeTokenizer, Map<string, number>>();

/** Encodes text as HF's BPE does: special tokens first, then per word the lowest-ranked merge, leftmost first. */
export function encodeBpe(tok: BpeTokenizer, text: string): number[] {
  let rank = ranks.get(tok);
  if (!rank) ranks.set(tok, (rank = new Map(tok.merges.map(([a, b], i) => [`${a} ${b}`, i]))));
  const specialId = new Map(tok.specialTokens.map((s) => [s.content, s.id]));
  const ids: number[] = [];
  for (const p of pretokenize(text, [...specialId.keys()], tok.splitPattern)) {
    if (typeof p !== "string") {
      ids.push(specialId.get(p.special)!);
      continue;
    }
    const parts = Array.from(byteLevel(p));
    for (;;) {
      let bestAt = -1;
      let bestRank = Infinity;
      for (let i = 0; i + 1 < parts.length; i++) {
        const r = rank.get(`${parts[i]} ${parts[i + 1]}`);
        if (r !== undefined && r < bestRank) [bestAt, bestRank] = [i, r];
      }
      if (bestAt < 0) break;
      parts.splice(bestAt, 2, parts[bestAt] + parts[bestAt + 1]);
    }
    for (const t of parts) ids.push(tok.vocab.get(t)!);
  }
  return ids;
}
