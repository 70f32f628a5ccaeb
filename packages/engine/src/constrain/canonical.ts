// Canonical tokenizations under a constraint. A byte-level automaton allows every token path that spells an
// allowed text, e.g. "n","o","t" for "not", which the tokenizer itself never writes: the model was trained on
// "not", so after an odd piece it is off its training distribution and writes worse text (a quarter of the guided
// email calls sampled at temperature 1.5 took such paths). For byte-pair encodings a token sequence is the
// tokenizer's own if every adjacent pair is (Vieira et al. 2025, "Language Models over Canonical Byte-Pair
// Encodings"). Each step therefore keeps the tokens that pair with the previous one and, looking a few tokens
// ahead through forks of the constraint, can go on in such pairs: a token can pair well and still leave only
// continuations that do not ("ans" before "wer" where the tokenizer writes "answer"). When nothing would be left,
// the step keeps the constraint's own set.
import type { TokenConstraint } from "../generate/types.ts";
import type { Vocab } from "./vocab.ts";

/** What the pair test needs from the tokenizer. */
export interface PairTokenizer {
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
}

const MAX_CACHED_PAIRS = 1 << 20;
const fatal = new TextDecoder("utf-8", { fatal: true });

/** Judges token pairs against the tokenizer; answers are cached. */
export class CanonicalPairs {
  private single = new Map<number, string | null>();
  private pairs = new Map<number, boolean>();
  /** Constraint states seen (TokenConstraint.key): a number each, and the ids they allow (once asked). */
  private states = new Map<string, { n: number; ids?: Int32Array | null }>();
  private stateCount = 0;
  /** Look-ahead answers by state number, token and depth. */
  private ahead = new Map<number, boolean>();

  /**
   * `maxCandidates`: a mask with more allowed tokens than this is left as it is (free text in a 150k vocabulary
   * would cost an encode per token per step; enums, ids and keys stay well under it). `depth`: how many tokens
   * the look ahead walks (see filter).
   */
  constructor(
    private tok: PairTokenizer,
    private vocab: Vocab,
    private V: number,
    readonly maxCandidates = 4096,
    readonly depth = 4,
  ) {}

  /** A token's text if it encodes back to itself alone, else null (then its pairs cannot be judged). */
  private text(id: number): string | null {
    let t = this.single.get(id);
    if (t !== undefined) return t;
    t = null;
    const b = this.vocab.bytes(id);
    if (b && b.length) {
      try {
        const s = fatal.decode(b);
        const ids = this.tok.encode(s, { addSpecialTokens: false });
        if (ids.length === 1 && ids[0] === id) t = s;
      } catch {
        // Part of a UTF-8 character: left unjudged.
      }
    }
    this.single.set(id, t);
    return t;
  }

  /**
   * False when the tokenizer, given the two tokens' text, writes something other than these two tokens (and each
   * of them alone is its own encoding). Unjudged pairs pass.
   */
  ok(prev: number, next: number): boolean {
    const key = prev * this.V + next;
    let r = this.pairs.get(key);
    if (r !== undefined) return r;
    const a = this.text(prev);
    const b = a === null ? null : this.text(next);
    r = true;
    if (a !== null && b !== null) {
      const ids = this.tok.encode(a + b, { addSpecialTokens: false });
      r = ids.length === 2 && ids[0] === prev && ids[1] === next;
    }
    // Bounded: a server that runs for days judges ever more pairs of a large vocabulary.
    if (this.pairs.size >= MAX_CACHED_PAIRS) this.pairs.clear();
    this.pairs.set(key, r);
    return r;
  }

  /**
   * The tokens of `mask` (what constraint `c` allows next) that may follow `prev` (-1: none yet) and from which,
   * looking up to `depth` tokens ahead through forks of `c`, the text can go on in pairs the tokenizer writes:
   * "ans" is dropped where the text must go on "wer" and the tokenizer writes "answer" itself (then "ans", "w"
   * pair, but "w", "er" do not). `mask` itself when that would leave nothing, or when it allows more than
   * maxCandidates tokens.
   */
  filter(c: TokenConstraint, prev: number, mask: Uint32Array): Uint32Array {
    // The ids, not the mask: the constraint may reuse its mask arrays while the look ahead asks it for more.
    const ids = setBits(mask, this.maxCandidates);
    if (!ids) return mask;
    const out = new Uint32Array(mask.length);
    let kept = 0;
    for (const id of ids) {
      if (prev >= 0 && !this.ok(prev, id)) continue;
      if (c.fork && !this.goesOn(c, id, this.depth)) continue;
      out[id >>> 5] |= 1 << (id & 31);
      kept++;
    }
    if (kept) return out;
    for (const id of ids) out[id >>> 5] |= 1 << (id & 31);
    return out;
  }

  /**
   * After `id`, `c` is complete, unconstrained or too wide to judge, or `depth` is spent, or it allows a token
   * that pairs with `id` and goes on in turn.
   */
  private goesOn(c: TokenConstraint, id: number, depth: number): boolean {
    const st = this.state(c);
    const memo = st && (st.n * this.V + id) * 8 + depth;
    const known = memo === undefined ? undefined : this.ahead.get(memo);
    if (known !== undefined) return known;
    const r = this.walk(c, id, depth);
    if (memo !== undefined) {
      if (this.ahead.size >= MAX_CACHED_PAIRS) this.ahead.clear();
      this.ahead.set(memo, r);
    }
    return r;
  }

  /** What is remembered of `c`'s state, when it has a key. */
  private state(c: TokenConstraint): { n: number; ids?: Int32Array | null } | undefined {
    const key = c.key?.();
    if (key === undefined) return undefined;
    let st = this.states.get(key);
    if (!st) {
      if (this.states.size >= 1 << 16) this.states.clear(); // numbers are never reused: old answers just go unused
      this.states.set(key, (st = { n: this.stateCount++ }));
    }
    return st;
  }

  private walk(c: TokenConstraint, id: number, depth: number): boolean {
    const f = c.fork!();
    f.accept(id);
    if (depth === 0 || f.done()) return true;
    const ids = this.allowedIds(f);
    if (!ids) return true;
    for (const u of ids) if (this.ok(id, u) && this.goesOn(f, u, depth - 1)) return true;
    return false;
  }

  /** The ids `c` allows now, null when it allows anything or more than maxCandidates; by its key when it has one. */
  private allowedIds(c: TokenConstraint): Int32Array | null {
    const st = this.state(c);
    if (st?.ids !== undefined) return st.ids;
    const m = c.allowed();
    const ids = m && setBits(m, this.maxCandidates);
    if (st) st.ids = ids;
    return ids;
  }
}

const scratch = new Int32Array(4097);

/**
 * The set bits' indices of a mask in order, or null when there are more than `limit`: one pass that stops at the
 * limit, so a wide mask costs little and a narrow one is read once.
 */
function setBits(mask: Uint32Array, limit: number): Int32Array | null {
  const buf = limit < scratch.length ? scratch : new Int32Array(limit + 1);
  let n = 0;
  for (let i = 0; i < mask.length; i++) {
    let w = mask[i];
    while (w) {
      const bit = w & -w;
      w ^= bit;
      if (n === limit) return null;
      buf[n++] = i * 32 + (31 - Math.clz32(bit));
    }
  }
  return buf.slice(0, n);
}

/** The same constraint, sampling only token pairs the tokenizer writes (see the file's comment). */
export function canonicalConstraint(pairs: CanonicalPairs, factory: () => TokenConstraint): () => TokenConstraint {
  return () => {
    const c = factory();
    let prev = -1;
    return {
      allowed() {
        const m = c.allowed();
        return m && pairs.filter(c, prev, m);
      },
      accept(id) {
        prev = id;
        c.accept(id);
      },
      done: () => c.done(),
    };
  };
}
