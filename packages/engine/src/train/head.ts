// The LM head in training: each row's logprob of its target from the final-normed states, and its backward,
// both streaming the head over vocabulary chunks so the (N, V) logits never exist at once.
import type { Recorder } from "@webart/gpu";
import { logprobsBackward, logprobsChunk, logprobsFinalize, logprobsStatsBytes } from "@webart/shaders";
import type { Model, WeightGrads } from "../model/model.ts";

/**
 * Token logprobs of `targets` from final-normed states h (N, C), streaming the LM head over vocabulary
 * chunks; writes lp, entropy and lse (N each). `allow` (packAllowed) restricts a row's softmax to its allowed set.
 */
export function headLogprobs(
  model: Model,
  rec: Recorder,
  h: GPUBuffer,
  targets: GPUBuffer,
  N: number,
  lp: GPUBuffer,
  ent: GPUBuffer,
  lse: GPUBuffer,
  chunk: number,
  allow?: GPUBuffer | null,
): void {
  const gpu = model.gpu;
  const V = model.config.vocabSize;
  const stats = gpu.buffer(logprobsStatsBytes(N), "activations", "logprob stats");
  const logits = gpu.buffer(N * Math.min(chunk, V) * 4, "activations", "logits chunk");
  for (let v0 = 0; v0 < V; v0 += chunk) {
    const cols = Math.min(chunk, V - v0);
    model.head(rec, h, N, logits, v0, v0 + cols, cols);
    logprobsChunk(
      gpu,
      rec,
      { logits, targets, stats, allow },
      { N, v0, cols },
      { first: v0 === 0, tuning: model.tuning.logprobs },
    );
  }
  logprobsFinalize(gpu, rec, { stats, logprob: lp, entropy: ent, lse }, { N });
  gpu.release(stats, logits);
}

/**
 * Head backward: from dlp (N), the loss's gradient at each row's logprob, through the logprobs and the LM head
 * into dhN (N, C), the gradient at the final norm's output, chunk by chunk over the vocabulary (each chunk's
 * logits computed again from h). Full fine-tuning's `weightGrads` also take the head's own gradient.
 */
export function headBackward(
  model: Model,
  rec: Recorder,
  h: GPUBuffer,
  targets: GPUBuffer,
  lse: GPUBuffer,
  ent: GPUBuffer,
  dlp: GPUBuffer,
  N: number,
  chunk: number,
  weightGrads?: WeightGrads,
  allow?: GPUBuffer | null,
): GPUBuffer {
  const gpu = model.gpu;
  const C = model.config.hiddenSize;
  const V = model.config.vocabSize;
  const dhN = gpu.buffer(N * C * 4, "activations", "dhN");
  rec.clear(dhN);
  const logits = gpu.buffer(N * chunk * 4, "activations", "logits chunk");
  for (let v0 = 0; v0 < V; v0 += chunk) {
    const cols = Math.min(chunk, V - v0);
    model.head(rec, h, N, logits, v0, v0 + cols, cols);
    logprobsBackward(gpu, rec, { logits, targets, lse, entropy: ent, dlogp: dlp, allow }, { N, v0, cols }); // → dlogits
    model.headBack(rec, logits, N, dhN, v0, v0 + cols);
    weightGrads?.head(rec, logits, h, N, v0, v0 + cols);
  }
  gpu.release(logits);
  return dhN;
}
