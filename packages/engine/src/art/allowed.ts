// The sets a constrained sampler drew a choice's tokens from, as a Choice carries them (SampledChoice.token_allowed,
// a webart extension): each distinct set once, as base64 of its bitmask's little-endian 32-bit words (bit v & 31 of
// word v >> 5 set = token v allowed), and per token the index of its set, or -1 where nothing was masked.

/** SampledChoice.token_allowed. */
export interface TokenAllowed {
  /** The distinct sets, each a vocabulary bitmask in base64. */
  sets: string[];
  /** Per token of token_ids: the index of its set in `sets`, or -1 (the whole vocabulary). */
  of: number[];
}

function toBase64(words: Uint32Array): string {
  const bytes = new Uint8Array(words.buffer, words.byteOffset, words.byteLength);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(b64: string, what: string): Uint32Array {
  let s: string;
  try {
    s = atob(b64);
  } catch {
    throw new Error(`${what} is not base64`);
  }
  if (s.length % 4) throw new Error(`${what} has ${s.length} bytes, not a whole number of 32-bit words`);
  const bytes = Uint8Array.from(s, (c) => c.charCodeAt(0));
  return new Uint32Array(bytes.buffer);
}

/** The per-token sets of a sample (equal sets one object, as the scheduler keeps them); undefined when none. */
export function encodeAllowed(perToken: readonly (Uint32Array | null)[] | undefined): TokenAllowed | undefined {
  if (!perToken?.some((m) => m)) return undefined;
  const index = new Map<Uint32Array, number>();
  const sets: string[] = [];
  const of = perToken.map((m) => {
    if (!m) return -1;
    let k = index.get(m);
    if (k === undefined) {
      index.set(m, (k = sets.length));
      sets.push(toBase64(m));
    }
    return k;
  });
  return { sets, of };
}

/**
 * Per token, the bitmask of its set (one object per distinct set) or null; checks the shape against the choice's
 * token count and, when given, the vocabulary (`words` = ceil(V / 32)). Errors name `where`.
 */
export function decodeAllowed(a: TokenAllowed, tokens: number, where: string, words?: number): (Uint32Array | null)[] {
  if (!a || !Array.isArray(a.sets) || !Array.isArray(a.of))
    throw new Error(`${where}.token_allowed must be { sets: string[], of: number[] }`);
  if (a.of.length !== tokens)
    throw new Error(`${where}.token_allowed.of has ${a.of.length} entries for ${tokens} token_ids`);
  const sets = a.sets.map((b, i) => {
    const m = fromBase64(b, `${where}.token_allowed.sets[${i}]`);
    if (words !== undefined && m.length !== words)
      throw new Error(
        `${where}.token_allowed.sets[${i}] has ${m.length} words; this model's vocabulary needs ${words}: ` +
          `the choice came from another model`,
      );
    return m;
  });
  return a.of.map((k, t) => {
    if (k === -1) return null;
    if (!Number.isInteger(k) || k < 0 || k >= sets.length)
      throw new Error(`${where}.token_allowed.of[${t}] is ${k}, not -1 or an index into its ${sets.length} sets`);
    return sets[k];
  });
}
