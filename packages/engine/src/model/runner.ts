// The scheduler's view of the model: one batched forward over mixed prefill/decode tokens against the
// KV cache, logits for the sampled rows only, sampling on the GPU, one readback of ids and logprobs.
import type { Gpu } from "@webart/gpu";
import { packSampleRows, sample, sampleMaskWords } from "@webart/shaders";
import type { SampleSpec, StepModel } from "../generate/scheduler.ts";
import { KvCache } from "./kv.ts";
import type { Model } from "./model.ts";

export class ModelRunner implements StepModel {
  readonly kv: KvCache;
  readonly vocabSize: number;
  /** Compute dispatches the last step() recorded (its forward, logits and sampling: one Recorder). */
  lastDispatches = 0;
  /** Host time of the last step() until its submit (encoding its forward, logits and sampling), in ms. */
  lastEncodeMs = 0;

  constructor(
    readonly model: Model,
    readonly slots: number,
    readonly maxContext: number,
  ) {
    this.kv = new KvCache(model.gpu, model.config, slots, maxContext);
    this.vocabSize = model.config.vocabSize;
  }

  copySlot(src: number, dst: number, len: number): void {
    this.kv.copySlot(src, dst, len);
  }

  async step(
    tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
  ): Promise<{ ids: Uint32Array; logprobs: Float32Array; top?: { tokenId: number; logprob: number }[][] }> {
    const gpu: Gpu = this.model.gpu;
    const t0 = performance.now();
    const N = tokens.ids.length;
    const V = this.vocabSize;
    const sp = new Uint32Array(2 * N);
    const seen = new Set<number>();
    let maxLen = 0;
    for (let i = 0; i < N; i++) {
      sp[2 * i] = tokens.slots[i];
      sp[2 * i + 1] = tokens.pos[i];
      seen.add(tokens.slots[i]);
      maxLen = Math.max(maxLen, tokens.pos[i] + 1);
    }
    const decode = seen.size === N; // one token per sequence: the decode kernel with split-KV
    const rec = gpu.recorder();
    this.kv.flush(rec);
    const ids = gpu.upload(tokens.ids);
    const slotPos = gpu.upload(sp);
    const { x } = this.model.forward(rec, ids, N, { kind: "cache", kv: this.kv, slotPos, decode, maxLen }, false);
    const S = samples.length;
    let out: Promise<ArrayBuffer>[] = [];
    let topLogits: Promise<ArrayBuffer> | undefined;
    const temp: GPUBuffer[] = [ids, slotPos, x];
    if (S) {
      // A decode step samples every row in order: the logits read x itself.
      const all = S === N && samples.every((s, i) => s.row === i);
      const rows = all ? undefined : gpu.upload(Uint32Array.from(samples.map((s) => s.row)));
      const logits = gpu.buffer(S * V * 4, "activations", "logits");
      this.model.logits(rec, x, N, rows, S, logits);
      const params = gpu.upload(
        packSampleRows(
          samples.map((s) => ({
            temperature: s.temperature,
            topK: s.topK,
            topP: s.topP,
            seed: s.seed,
            step: s.step,
            stream: s.stream,
          })),
        ),
      );
      let mask: GPUBuffer | undefined;
      if (samples.some((s) => s.mask)) {
        const words = sampleMaskWords(V);
        const m = new Uint32Array(S * words).fill(0xffffffff);
        samples.forEach((s, i) => s.mask && m.set(s.mask.subarray(0, words), i * words));
        mask = gpu.upload(m);
        temp.push(mask);
      }
      const outIds = gpu.buffer(S * 4, "activations", "sampled ids");
      const outLp = gpu.buffer(S * 4, "activations", "sampled logprobs");
      sample(
        gpu,
        rec,
        { logits, rows: params, tokens: outIds, logprobs: outLp, mask },
        { B: S, V },
        { tuning: this.model.tuning.sample },
      );
      out = [rec.read(outIds, S * 4), rec.read(outLp, S * 4)];
      if (samples.some((s) => s.top > 0)) topLogits = rec.read(logits, S * V * 4);
      temp.push(logits, params, outIds, outLp);
      if (rows) temp.push(rows);
    }
    gpu.release(...temp);
    this.lastDispatches = rec.dispatches;
    this.lastEncodeMs = performance.now() - t0;
    await rec.submit();
    if (!S) return { ids: new Uint32Array(0), logprobs: new Float32Array(0) };
    const [idsBuf, lpBuf] = await Promise.all(out);
    const res: { ids: Uint32Array; logprobs: Float32Array; top?: { tokenId: number; logprob: number }[][] } = {
      ids: new Uint32Array(idsBuf),
      logprobs: new Float32Array(lpBuf),
    };
    if (topLogits) {
      const all = new Float32Array(await topLogits);
      res.top = samples.map((s, i) => (s.top > 0 ? topLogprobs(all.subarray(i * V, (i + 1) * V), s.top) : []));
    }
    return res;
  }
}

/** The k most likely tokens of a logits row with their log-softmax values. */
export function topLogprobs(row: Float32Array, k: number): { tokenId: number; logprob: number }[] {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  const best: { tokenId: number; logprob: number }[] = [];
  for (let i = 0; i < row.length; i++) {
    if (best.length < k || row[i] > best[best.length - 1].logprob + lse) {
      best.push({ tokenId: i, logprob: row[i] - lse });
      best.sort((a, b) => b.logprob - a.logprob);
      if (best.length > k) best.pop();
    }
  }
  return best;
}
