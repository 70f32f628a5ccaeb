// The JSON constraint on a small byte-level BPE trained here: many random-policy runs per schema (every
// output parses and fits, generation stops within the length bound, EOS only when complete), masks checked
// against byte-wise stepping, and random valid JSON forced through token by token.
import { Rng } from "@webart/gpu";
import { describe, expect, it } from "vitest";
import { SPECIAL_TOKENS, tokenizerConfig, tokenizerJson, trainBpe } from "@webart/envs";
import { Tokenizer } from "../tokenizer/index.ts";
import { createJsonConstraintFactory, type JsonConstraint } from "./index.ts";
import { drive, isAllowed, randomValue, SCHEMAS, validate } from "./testing.ts";

const rng = new Rng(7);
const corpus: string[] = [];
for (const s of Object.values(SCHEMAS))
  for (let i = 0; i < 20; i++) {
    const v = randomValue(s, rng);
    corpus.push(JSON.stringify(v), JSON.stringify(v, null, 1), `The answer is ${JSON.stringify(v)}.`);
  }
const bpe = trainBpe(corpus, { vocabSize: 420, specialTokens: SPECIAL_TOKENS });
const tok = Tokenizer.fromJSON(tokenizerJson(bpe), tokenizerConfig(bpe));
const eosIds = [tok.eosId!, tok.padId!];
const V = tok.vocabSize + 3; // a model vocabulary padded past the tokenizer's, as real checkpoints are
const limits = {
  maxStringLength: 6,
  maxItems: 3,
  maxProperties: 3,
  maxDepth: 6,
  maxWhitespace: 1,
  maxNumberLength: 10,
};
const factory = createJsonConstraintFactory(tok, { eosIds, vocabSize: V, ...limits });

/** The longest output the limits allow for json_object (every string character as a 6-byte escape). */
function maxBytes(depth: number): number {
  const ws = limits.maxWhitespace;
  const str = 2 + 6 * limits.maxStringLength;
  const scalar = Math.max(str, limits.maxNumberLength, 5);
  const value = depth >= limits.maxDepth ? scalar : Math.max(scalar, maxBytes(depth + 1));
  const member = ws + str + ws + 1 + ws + value + ws + 1;
  return 2 + ws + Math.max(member * limits.maxProperties, (ws + value + ws + 1) * limits.maxItems);
}

describe("json constraint on a small BPE", () => {
  it("has a byte-level vocabulary with special tokens", () => {
    expect(tok.vocabSize).toBeGreaterThan(300);
    expect(tok.specialIds.has(tok.eosId!)).toBe(true);
  });

  for (const [name, schema] of Object.entries({ json_object: null, ...SCHEMAS })) {
    it(`random policy: ${name}`, () => {
      const make = factory(schema);
      const r = new Rng(name.length * 1000 + 1);
      const bound = maxBytes(1);
      let eosEnds = 0;
      for (let run = 0; run < 150; run++) {
        const c = make() as JsonConstraint;
        const d = drive(c, r, { eosIds, maxSteps: bound + 1, probe: 6, vocab: V });
        expect(d.end, `run ${run}`).not.toBe("stuck");
        expect(d.end, `run ${run}`).not.toBe("limit");
        eosEnds += d.end === "eos" ? 1 : 0;
        const text = tok.decode(d.ids);
        const value = JSON.parse(text);
        expect(validate(value, schema ?? { type: "object" }), text).toBe(null);
        // EOS is offered exactly when the text so far is a complete value (a number may go on).
        for (const step of d.eosSteps) {
          const prefix = tok.decode(d.ids.slice(0, step));
          expect(validate(JSON.parse(prefix), schema ?? { type: "object" }), prefix).toBe(null);
        }
        if (d.end === "done") {
          const m = c.allowed();
          const set = [...m.keys()]
            .flatMap((w) => Array.from({ length: 32 }, (_, b) => w * 32 + b))
            .filter((i) => isAllowed(m, i));
          expect(set.sort()).toEqual([...eosIds].sort());
        }
        for (const id of tok.specialIds) if (!eosIds.includes(id)) expect(isAllowed(c.allowed(), id)).toBe(false);
      }
      if (name === "number" || name === "literals") expect(eosEnds).toBeGreaterThan(0);
    });

    if (schema !== null && name !== "any")
      it(`forced valid values: ${name}`, () => {
        const make = factory(schema);
        const r = new Rng(99);
        for (let i = 0; i < 40; i++) {
          const v = randomValue(schema, r);
          expect(validate(v, schema)).toBe(null);
          // One whitespace byte per gap is allowed; enum/const values only in compact form.
          const pretty = i % 2 === 0 && name !== "literals";
          const text = pretty ? JSON.stringify(v, null, 1).replace(/\n +/g, "\n") : JSON.stringify(v);
          const c = make() as JsonConstraint;
          for (const id of tok.encode(text)) {
            expect(isAllowed(c.allowed(), id), `${text} at ${JSON.stringify(tok.decode([id]))}`).toBe(true);
            c.accept(id);
          }
          expect(c.failed).toBe(false);
          expect(c.done() || eosIds.every((e) => isAllowed(c.allowed(), e)), text).toBe(true);
        }
      });
  }

  it("depth limit: a recursive schema closes in time instead of getting stuck", () => {
    const shallow = createJsonConstraintFactory(tok, { eosIds, vocabSize: V, ...limits, maxDepth: 4 });
    const make = shallow(SCHEMAS.tree);
    const r = new Rng(5);
    let deepest = 0;
    for (let run = 0; run < 60; run++) {
      const d = drive(make() as JsonConstraint, r, { eosIds, maxSteps: 2000, vocab: V });
      expect(d.end).toBe("done");
      const text = tok.decode(d.ids);
      expect(validate(JSON.parse(text), SCHEMAS.tree)).toBe(null);
      let depth = 0;
      for (const ch of text.replace(/"(\\.|[^"\\])*"/g, "")) {
        depth += ch === "{" || ch === "[" ? 1 : ch === "}" || ch === "]" ? -1 : 0;
        deepest = Math.max(deepest, depth);
      }
    }
    expect(deepest).toBe(4); // reached, never passed
  });

  it("masks have ceil(V/32) words and nothing past the tokenizer", () => {
    const m = factory(null)().allowed()!;
    expect(m.length).toBe(Math.ceil(V / 32));
    for (let id = tok.vocabSize; id < m.length * 32; id++) expect(isAllowed(m, id)).toBe(false);
  });

  it("a model vocabulary smaller than the tokenizer's (Gemma 3 text models) leaves the extra ids out", () => {
    // The tokenizer's last added tokens (after the end-of-sequence ids) have no embedding row, as Gemma 3's image token.
    const small = Math.max(...eosIds) + 1;
    expect(small).toBeLessThan(tok.vocabSize);
    const f = createJsonConstraintFactory(tok, { eosIds, vocabSize: small, ...limits });
    const m = f(null)().allowed()!;
    expect(m.length).toBe(Math.ceil(small / 32));
    for (let id = small; id < m.length * 32; id++) expect(isAllowed(m, id)).toBe(false);
    const r = new Rng(3);
    for (let run = 0; run < 20; run++) {
      const d = drive(f(SCHEMAS.person)() as JsonConstraint, r, { eosIds, maxSteps: maxBytes(1) + 1, vocab: small });
      expect(["eos", "done"]).toContain(d.end);
      expect(d.ids.every((id) => id < small)).toBe(true);
      expect(validate(JSON.parse(tok.decode(d.ids)), SCHEMAS.person)).toBe(null);
    }
  });
});
