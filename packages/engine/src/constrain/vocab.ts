// What each token id appends to the output, as bytes, and the tries over those byte strings that the
// JSON constraint walks. Built once per tokenizer (about a second for Qwen's 151k tokens) and shared.
import type { Tokenizer } from "../tokenizer/index.ts";

/** The parts of the tokenizer this module needs. */
export type VocabTokenizer = Pick<Tokenizer, "vocabSize" | "specialIds" | "decode" | "idToToken">;

/**
 * A trie in preorder: node 0 is the root; the subtree of node k spans [k, end[k]), so its first child is
 * k + 1 (when k + 1 < end[k]) and the next sibling of child c is end[c]. byte[k] is the edge into k.
 * tok[k] is a token id whose bytes end at k (-1 for none); next[id] chains tokens with equal bytes.
 */
export interface Trie {
  byte: Uint8Array;
  end: Int32Array;
  tok: Int32Array;
  next: Int32Array;
}

export interface Vocab {
  /** Words per mask row: ceil(V / 32) for the model's V. */
  words: number;
  /** Bytes a token appends (null: never allowed, e.g. special tokens and ids past the tokenizer). */
  bytes(id: number): Uint8Array | null;
  /** Every usable token. */
  full: Trie;
  /** Usable tokens that are not "plain" (see plainChars): what a string body must still walk. */
  special: Trie;
  /** Allowed-token mask of the plain tokens of at most r characters. */
  plainMask(r: number): Uint32Array;
}

/** GPT-2's byte-level alphabet, inverted: code point -> byte (-1 if the code point is not in it). */
const CHAR_TO_BYTE: Int16Array = (() => {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  const inv = new Int16Array(512).fill(-1);
  let extra = 0;
  for (let b = 0; b < 256; b++) inv[printable(b) ? b : 256 + extra++] = b;
  return inv;
})();

const utf8 = new TextEncoder();
const lossy = new TextDecoder("utf-8");

/** The bytes a token appends to decoded text, or null when they cannot be known from the token alone. */
export function tokenBytes(tok: VocabTokenizer, id: number): Uint8Array | null {
  const piece = tok.idToToken(id);
  if (piece === undefined || piece.length === 0) return null;
  const text = tok.decode([id]);
  // Byte-level BPE (GPT-2, Llama 3, Qwen): the piece spells the bytes in GPT-2's alphabet. Confirm it
  // against the decoder, since other tokenizers' pieces can also be printable ASCII.
  const bytes = new Uint8Array(piece.length);
  let byteLevel = true;
  for (let i = 0; i < piece.length && byteLevel; i++) {
    const c = piece.charCodeAt(i);
    const b = c < 512 ? CHAR_TO_BYTE[c] : -1;
    if (b < 0) byteLevel = false;
    else bytes[i] = b;
  }
  if (byteLevel && lossy.decode(bytes) === text) return bytes;
  // SentencePiece (Metaspace): "▁" is a space, which decoding a lone token drops at the start.
  if (piece.includes("\u2581")) {
    const spaced = piece.replace(/\u2581/g, " ");
    if (spaced === text || spaced.slice(1) === text) return utf8.encode(spaced);
  }
  // SentencePiece byte fallback.
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
  if (m) return Uint8Array.of(parseInt(m[1], 16));
  // Anything else that decodes to whole characters on its own.
  return text.length > 0 && !text.includes("\uFFFD") ? utf8.encode(text) : null;
}

/**
 * Characters a token adds inside a JSON string when it is "plain": no quote, backslash or control byte, and
 * valid UTF-8 from a character boundary (possibly ending inside a character, which then counts as one).
 * -1 otherwise. Plain tokens are valid in any string body with room for them, which is what lets a string
 * step take them as one precomputed mask instead of a trie walk.
 */
export function plainChars(bytes: Uint8Array): number {
  let chars = 0;
  let need = 0;
  let lo = 0x80;
  let hi = 0xbf;
  for (const x of bytes) {
    if (need > 0) {
      if (x < lo || x > hi) return -1;
      need--;
      lo = 0x80;
      hi = 0xbf;
      continue;
    }
    if (x < 0x20 || x === 0x22 || x === 0x5c) return -1;
    chars++;
    if (x < 0x80) continue;
    const lead = utf8Lead(x);
    if (lead < 0) return -1;
    need = lead >> 3;
    [lo, hi] = CONT_RANGE[lead & 7];
  }
  return chars;
}

/** Allowed range of the first continuation byte, by kind (strict UTF-8: no overlongs, surrogates or > U+10FFFF). */
export const CONT_RANGE: [number, number][] = [
  [0x80, 0xbf],
  [0xa0, 0xbf],
  [0x80, 0x9f],
  [0x90, 0xbf],
  [0x80, 0x8f],
];

/** For a byte >= 0x80 that may start a character: continuation bytes needed * 8 + CONT_RANGE kind; -1 if invalid. */
export function utf8Lead(x: number): number {
  if (x >= 0xc2 && x <= 0xdf) return 8;
  if (x === 0xe0) return 16 + 1;
  if (x === 0xed) return 16 + 2;
  if (x >= 0xe1 && x <= 0xef) return 16;
  if (x === 0xf0) return 24 + 3;
  if (x === 0xf4) return 24 + 4;
  if (x >= 0xf1 && x <= 0xf3) return 24;
  return -1;
}

function buildTrie(entries: { id: number; bytes: Uint8Array }[], vocab: number): Trie {
  // Sort "bytes as latin-1, U+0100, id" strings with the built-in order (much faster than a comparator).
  // U+0100 sorts after every byte, so a token follows its extensions; prefixes still stay contiguous.
  const keys = entries.map((e) => String.fromCharCode.apply(null, e.bytes as unknown as number[]) + "\u0100" + e.id);
  keys.sort();
  const byte: number[] = [0];
  const tok: number[] = [-1];
  const end: number[] = [0];
  const next = new Int32Array(vocab).fill(-1);
  const path = [0];
  let prev = "";
  for (const k of keys) {
    const len = k.lastIndexOf("\u0100");
    const id = Number(k.slice(len + 1));
    let l = 0;
    while (l < prev.length && l < len && prev.charCodeAt(l) === k.charCodeAt(l)) l++;
    while (path.length - 1 > l) end[path.pop()!] = byte.length;
    for (let d = l; d < len; d++) {
      path.push(byte.length);
      byte.push(k.charCodeAt(d));
      tok.push(-1);
      end.push(0);
    }
    const node = path[len];
    next[id] = tok[node];
    tok[node] = id;
    prev = k.slice(0, len);
  }
  while (path.length) end[path.pop()!] = byte.length;
  return { byte: Uint8Array.from(byte), end: Int32Array.from(end), tok: Int32Array.from(tok), next };
}

const cache = new WeakMap<object, Map<string, Vocab>>();

/**
 * The token tables for a tokenizer (cached per tokenizer, model vocabulary size and excluded ids).
 * vocabSize: the model's V (masks have ceil(V/32) words), usually at least the tokenizer's; tokenizer ids at or past
 * V (Gemma 3's image token, which the text-only models have no embedding row for) can never be sampled and are left
 * out. exclude: ids that never appear inside the JSON text (the end-of-sequence ids).
 */
export function vocabFor(tok: VocabTokenizer, vocabSize: number, exclude: readonly number[]): Vocab {
  const key = `${vocabSize}:${[...exclude].sort((a, b) => a - b).join(",")}`;
  let perTok = cache.get(tok);
  if (!perTok) cache.set(tok, (perTok = new Map()));
  const hit = perTok.get(key);
  if (hit) return hit;
  const excluded = new Set(exclude);
  // One flat buffer (token id's bytes at [start[id], start[id + 1])) rather than 151k small arrays: fewer
  // heap objects for the garbage collector to trace.
  const start = new Int32Array(vocabSize + 1);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const all: { id: number; bytes: Uint8Array }[] = [];
  const special: { id: number; bytes: Uint8Array }[] = [];
  const plain: { id: number; chars: number }[] = [];
  for (let id = 0; id < vocabSize; id++) {
    start[id] = size;
    if (id >= tok.vocabSize || tok.specialIds.has(id) || excluded.has(id)) continue;
    const b = tokenBytes(tok, id);
    if (!b) continue;
    chunks.push(b);
    size += b.length;
    all.push({ id, bytes: b });
    const chars = plainChars(b);
    if (chars > 0) plain.push({ id, chars });
    else special.push({ id, bytes: b });
  }
  start[vocabSize] = size;
  const data = new Uint8Array(size);
  for (let id = 0, at = 0; id < chunks.length; at += chunks[id++].length) data.set(chunks[id], at);
  // Cumulative masks by length: plainMasks[r] holds the plain tokens of at most r characters.
  const words = Math.ceil(vocabSize / 32);
  const maxChars = plain.reduce((m, p) => Math.max(m, p.chars), 0);
  const plainMasks = Array.from({ length: maxChars + 1 }, () => new Uint32Array(words));
  for (const p of plain) plainMasks[p.chars][p.id >>> 5] |= 1 << (p.id & 31);
  for (let r = 1; r <= maxChars; r++) for (let w = 0; w < words; w++) plainMasks[r][w] |= plainMasks[r - 1][w];
  const vocab: Vocab = {
    words,
    bytes: (id) =>
      id >= 0 && id < vocabSize && start[id + 1] > start[id] ? data.subarray(start[id], start[id + 1]) : null,
    full: buildTrie(all, vocabSize),
    special: buildTrie(special, vocabSize),
    plainMask: (r) => plainMasks[Math.max(0, Math.min(r, maxChars))],
  };
  perTok.set(key, vocab);
  return vocab;
}
