// Constrained decoding for JSON: a TokenConstraint per sample that allows exactly the tokens whose bytes
// keep the output a valid prefix of JSON fitting the schema, computed by walking the token trie alongside
// the automaton, with masks cached per automaton state and shared by all samples of a schema.
import type { TokenConstraint } from "../generate/types.ts";
import { Automaton, type Thread } from "./automaton.ts";
import { compileSchema, DEFAULT_LIMITS, type JsonLimits, type Node } from "./schema.ts";
import { vocabFor, type Trie, type Vocab, type VocabTokenizer } from "./vocab.ts";

export interface JsonConstraintOptions extends Partial<JsonLimits> {
  /** Tokens that end the sequence: allowed only once the JSON value is complete. */
  eosIds: number[];
  /** Tokens never allowed, e.g. added markup tokens that are not special (<think>, <tool_call>). */
  excludeIds?: number[];
  /** The model's vocabulary size V (masks have ceil(V/32) words); default the tokenizer's. */
  vocabSize?: number;
  /**
   * Masks cached per schema (each ceil(V/32) * 4 bytes, 19 KB for Qwen); default 256. Evicted masks are
   * reused, so a mask returned by allowed() is good until this many other states have been computed: keep
   * it above the number of samples decoded at once.
   */
  maskCacheSize?: number;
}

let grammars = 0;

/** A compiled schema with the token tables: computes (and caches) the allowed-token mask of a state. */
export class JsonGrammar {
  /** Distinguishes this grammar's states from other grammars' in constraint keys. */
  readonly id = ++grammars;
  private readonly masks = new Map<string, Uint32Array>();
  /** The mask allowing only the end-of-sequence tokens. */
  readonly eos: Uint32Array;
  private readonly eosSet: Set<number>;
  /** Scratch thread lists per trie depth, reused across walks. */
  private readonly scratch: Thread[][] = [];

  constructor(
    readonly root: Node,
    readonly vocab: Vocab,
    readonly automaton: Automaton,
    private readonly eosIds: readonly number[],
    private readonly cacheSize: number,
  ) {
    this.eos = new Uint32Array(vocab.words);
    for (const id of eosIds) setBit(this.eos, id);
    this.eosSet = new Set(eosIds);
  }

  isEos(id: number): boolean {
    return this.eosSet.has(id);
  }

  /**
   * Allowed tokens after the automaton reached `threads` (deduped). The result belongs to the cache: do not
   * modify it, and use it before `cacheSize` further masks of this schema are computed (a scheduler step).
   */
  mask(threads: Thread[]): Uint32Array {
    if (threads.length === 0) return new Uint32Array(this.vocab.words);
    if (threads.every((t) => t.finished)) return this.eos;
    const key = threads.length === 1 ? threads[0].key : threads.map((t) => t.key).join(";");
    const hit = this.masks.get(key);
    if (hit) {
      // Least recently used first: refresh the entry.
      this.masks.delete(key);
      this.masks.set(key, hit);
      return hit;
    }
    // Recycle the least recently used mask once the cache is full: allocating a fresh 19 KB array per
    // state churns external memory, which makes V8 run full collections of the whole heap.
    let mask: Uint32Array;
    if (this.masks.size >= this.cacheSize) {
      const [oldest, recycled] = this.masks.entries().next().value!;
      this.masks.delete(oldest);
      mask = recycled.fill(0);
    } else mask = new Uint32Array(this.vocab.words);
    // String bodies take every plain token that fits from a precomputed mask; only the rest of the
    // vocabulary (tokens with quotes, escapes, control bytes or partial characters) is walked.
    const inString = threads.filter((t) => t.inPlainString);
    const other = threads.filter((t) => !t.inPlainString);
    if (inString.length) {
      const plain = this.vocab.plainMask(Math.max(...inString.map((t) => t.room)));
      for (let w = 0; w < mask.length; w++) mask[w] |= plain[w];
      this.walk(this.vocab.special, 0, inString, mask, 0);
    }
    if (other.length) this.walk(this.vocab.full, 0, other, mask, 0);
    if (threads.some((t) => t.complete)) for (const id of this.eosIds) setBit(mask, id);
    this.masks.set(key, mask);
    return mask;
  }

  /** Marks every token in the subtree of `node` whose bytes keep some thread alive. */
  private walk(trie: Trie, node: number, threads: Thread[], mask: Uint32Array, depth: number): void {
    const { byte, end, tok, next } = trie;
    const out = (this.scratch[depth] ??= []);
    for (let c = node + 1; c < end[node]; c = end[c]) {
      out.length = 0;
      for (const t of threads) this.automaton.step(t, byte[c], out);
      if (out.length === 0) continue;
      for (let id = tok[c]; id >= 0; id = next[id]) setBit(mask, id);
      if (end[c] > c + 1) this.walk(trie, c, out.slice(), mask, depth + 1);
    }
  }
}

function setBit(mask: Uint32Array, id: number): void {
  if (id >= 0 && id >>> 5 < mask.length) mask[id >>> 5] |= 1 << (id & 31);
}

/** One sample's constraint: the automaton's threads after the tokens accepted so far. */
export class JsonConstraint implements TokenConstraint {
  private threads: Thread[];
  private ended = false;

  constructor(private readonly g: JsonGrammar) {
    this.threads = [g.automaton.initial(g.root)];
  }

  allowed(): Uint32Array {
    return this.ended ? this.g.eos : this.g.mask(this.threads);
  }

  accept(tokenId: number): void {
    if (this.ended) return;
    if (this.g.isEos(tokenId)) {
      // End of sequence: fine once the value is complete, a violation before.
      if (this.threads.some((t) => t.complete)) this.ended = true;
      else this.threads = [];
      return;
    }
    const bytes = this.g.vocab.bytes(tokenId);
    let threads = bytes ? this.threads : [];
    for (let i = 0; bytes && i < bytes.length && threads.length; i++) {
      const out: Thread[] = [];
      for (const t of threads) this.g.automaton.step(t, bytes[i], out);
      threads = out.length > 1 ? dedupe(out) : out;
    }
    this.threads = threads;
  }

  done(): boolean {
    return this.ended || (this.threads.length > 0 && this.threads.every((t) => t.finished));
  }

  /** An independent copy of this state (the states are immutable, so this is cheap). */
  fork(): JsonConstraint {
    const c = new JsonConstraint(this.g);
    c.threads = this.threads;
    c.ended = this.ended;
    return c;
  }

  key(): string {
    return `j${this.g.id}:${this.ended ? "end" : this.threads.map((t) => t.key).join(";")}`;
  }

  /** True after a token the constraint did not allow (then nothing is allowed any more). */
  get failed(): boolean {
    return !this.ended && this.threads.length === 0;
  }
}

function dedupe(threads: Thread[]): Thread[] {
  const seen = new Map<string, Thread>();
  for (const t of threads) if (!seen.has(t.key)) seen.set(t.key, t);
  return [...seen.values()];
}

/**
 * The factory a ServedModel exposes as jsonConstraint: schema (null = json_object) -> a constraint per sample.
 * Compiling throws JsonSchemaError for schemas it cannot enforce. Compiled schemas (and their mask caches)
 * are kept for the 8 most recent schemas, since a rollout sends the same one many times.
 */
export function createJsonConstraintFactory(
  tokenizer: VocabTokenizer,
  opts: JsonConstraintOptions,
): (schema: Record<string, unknown> | null) => () => TokenConstraint {
  const { eosIds, excludeIds = [], vocabSize, maskCacheSize, ...rest } = opts;
  const limits: JsonLimits = { ...DEFAULT_LIMITS, ...rest };
  for (const [k, v] of Object.entries(limits)) {
    // An object needs depth 1 and a number one character; the rest may be 0 (e.g. compact JSON only).
    const least = k === "maxDepth" || k === "maxNumberLength" ? 1 : 0;
    if (!Number.isInteger(v) || v < least)
      throw new Error(`json constraint: ${k} must be an integer >= ${least}, got ${v}`);
  }
  const vocab = vocabFor(tokenizer, vocabSize ?? tokenizer.vocabSize, [...eosIds, ...excludeIds]);
  const automaton = new Automaton(limits);
  const grammars = new Map<string, JsonGrammar>();
  return (schema) => {
    const key = JSON.stringify(schema);
    let g = grammars.get(key);
    if (g) grammars.delete(key);
    else g = new JsonGrammar(compileSchema(schema, limits).root, vocab, automaton, eosIds, maskCacheSize ?? 256);
    grammars.set(key, g);
    if (grammars.size > 8) grammars.delete(grammars.keys().next().value!);
    const grammar = g;
    return () => new JsonConstraint(grammar);
  };
}
