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
    if (count(mask) > this.maxCandidates) return mask;
    // A copy: the constraint may reuse its mask arrays while the look ahead asks it for more.
    const m = mask.slice();
    const out = new Uint32Array(m.length);
    let kept = 0;
    forEachBit(m, (id) => {
      if (prev >= 0 && !this.ok(prev, id)) return;
      if (c.fork && !this.goesOn(c, id, this.depth)) return;
      out[id >>> 5] |= 1 << (id & 31);
      kept++;
    });
    return kept ? out : m;
  }

  /**
   * After `id`, `c` is complete, unconstrained or too wide to judge, or `depth` is spent, or it allows a token
   * that pairs with `id` and goes on in turn.
   */
  private goesOn(c: TokenConstraint, id: number, depth: number): boolean {
    const f = c.fork!();
    f.accept(id);
    if (depth === 0 || f.done()) return true;
    const next = f.allowed();
    if (!next || count(next) > this.maxCandidates) return true;
    let found = false;
    forEachBit(next.slice(), (u) => !(found = this.ok(id, u) && this.goesOn(f, u, depth - 1)));
    return found;
  }
}

function count(mask: Uint32Array): number {
  let n = 0;
  for (const w of mask) n += popcount(w);
  return n;
}

/** Calls `f` with each set bit's index in order until it returns false. */
function forEachBit(mask: Uint32Array, f: (id: number) => boolean | void): void {
  for (let i = 0; i < mask.length; i++) {
    let w = mask[i];
    while (w) {
      const bit = w & -w;
      w ^= bit;
      if (f(i * 32 + (31 - Math.clz32(bit))) === false) return;
    }
  }
}

/** Set bits of a 32-bit mask word. */
export function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (((x + (x >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
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
