// vLLM's `guided_choice`: the reply is exactly one of a list of strings, then the end of the turn. The sampler
// draws among the tokens that keep the text a prefix of some choice, so the model's own probabilities pick
// among the choices (a single choice forces it), and each token's reported logprob is still the model's.
import type { TokenConstraint } from "../generate/types.ts";
import type { Vocab } from "./vocab.ts";

const enc = new TextEncoder();

/** Sets in `mask` every token whose bytes are a non-empty prefix of one of `rests` (never spanning past its end). */
export function prefixMask(vocab: Vocab, V: number, rests: readonly Uint8Array[], mask: Uint32Array): Uint32Array {
  for (let id = 0; id < V; id++) {
    const b = vocab.bytes(id);
    if (!b || b.length === 0) continue;
    if (rests.some((r) => b.length <= r.length && b.every((x, i) => x === r[i]))) mask[id >>> 5] |= 1 << (id & 31);
  }
  return mask;
}

/** A constraint per sample: one of `choices` (non-empty strings), then one of `eosIds`. */
export function choiceConstraint(
  vocab: Vocab,
  V: number,
  eosIds: readonly number[],
  choices: readonly string[],
): () => TokenConstraint {
  const all = choices.map((c) => enc.encode(c));
  // `rests`: what is left of each choice the text so far is a prefix of.
  const state = (rests: Uint8Array[], ended: boolean): TokenConstraint => {
    return {
      allowed() {
        const mask = new Uint32Array(vocab.words);
        if (ended) return mask;
        prefixMask(
          vocab,
          V,
          rests.filter((r) => r.length > 0),
          mask,
        );
        if (rests.some((r) => r.length === 0)) for (const id of eosIds) if (id < V) mask[id >>> 5] |= 1 << (id & 31);
        return mask;
      },
      accept(id) {
        if (ended) return;
        if (eosIds.includes(id)) {
          ended = true;
          if (!rests.some((r) => r.length === 0)) rests = [];
          return;
        }
        const b = vocab.bytes(id);
        rests =
          b && b.length > 0
            ? rests
                .filter((r) => b.length <= r.length && b.every((x, i) => x === r[i]))
                .map((r) => r.subarray(b.length))
            : [];
      },
      done() {
        return rests.length > 0 && rests.every((r) => r.length === 0);
      },
      fork: () => state(rests, ended),
    };
  };
  return () => state(all, false);
}
