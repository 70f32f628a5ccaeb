// Sft.toSequences: the pretraining sequences of a tool-use transcript train the assistant turns the script means
// the model to learn, and keep a slip (an untrained turn) as context only.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { Tokenizer } from "@webart/engine";
import { emailTranscripts } from "@webart/envs";
import { Sft } from "./sft.ts";

const MODEL = join(import.meta.dirname, "../../../../../models/webart-tools");
const sft = await Sft.load(MODEL, { seed: 1, batch: 1, lr: 0, evalGames: 0, contextWeight: 0 }, () => {}, {
  name: "webart-tools",
  maxContext: 2048,
});
afterAll(() => sft.close());
const json = (f: string) => JSON.parse(readFileSync(join(MODEL, f), "utf8")) as object;
const tok = Tokenizer.fromJSON(json("tokenizer.json"), json("tokenizer_config.json"));

/** The trained spans of a sequence, decoded. */
function trained(ids: ArrayLike<number>, mask: ArrayLike<number>): string[] {
  const spans: string[] = [];
  for (let t = 0; t < ids.length; t++) {
    if (!mask[t]) continue;
    const s = t;
    while (t < ids.length && mask[t]) t++;
    spans.push(tok.decode(Array.from(ids).slice(s, t)));
  }
  return spans;
}

it("trains every assistant turn but a slip, which stays in the sequence as context", async () => {
  const [plain] = await emailTranscripts({ episodes: 1, perfect: 1, seed: 5 });
  const [slipped] = await emailTranscripts({ episodes: 1, perfect: 1, slip: 1, seed: 5, start: 1 });
  const turns = (t: typeof plain) => t.messages.filter((m) => m.role === "assistant").length;

  const [p] = sft.toSequences(plain);
  expect(trained(p.ids, p.mask)).toHaveLength(turns(plain));

  const [s] = sft.toSequences(slipped);
  const spans = trained(s.ids, s.mask);
  expect(spans).toHaveLength(turns(slipped) - 1);
  const slip = slipped.messages[slipped.untrained![0]];
  const args =
    slip.role === "assistant" && slip.tool_calls?.[0].type === "function" ? slip.tool_calls[0].function : null;
  // The slip's call is in the sequence, and in none of its trained spans; the right call after it is trained.
  expect(tok.decode(s.ids)).toContain(args!.arguments);
  expect(spans.some((x) => x.includes(args!.arguments))).toBe(false);
  expect(spans.some((x) => x.includes(args!.name))).toBe(true);
});
