// Test helpers for the model: prefill logits of one sequence.
import type { Gpu } from "@webart/gpu";
import { KvCache } from "./kv.ts";
import type { Model } from "./model.ts";

/** Prefill logits (T, V) of `ids` as one sequence, with whatever adapter the model holds. */
export async function prefillLogits(gpu: Gpu, model: Model, ids: number[]): Promise<Float32Array> {
  const N = ids.length;
  const V = model.config.vocabSize;
  const kv = new KvCache(gpu, model.config, 1, 32);
  const rec = gpu.recorder();
  kv.flush(rec);
  const idBuf = gpu.upload(Uint32Array.from(ids));
  const slotPos = gpu.upload(Uint32Array.from(ids.flatMap((_, pos) => [0, pos])));
  const { x } = model.forward(rec, idBuf, N, { kind: "cache", kv, slotPos, decode: false, maxLen: N }, false);
  const rows = gpu.upload(Uint32Array.from(ids.map((_, i) => i)));
  const out = gpu.buffer(N * V * 4);
  model.logits(rec, x, N, rows, N, out);
  const read = rec.read(out, N * V * 4);
  gpu.release(idBuf, slotPos, x, rows, out);
  await rec.submit();
  kv.dispose();
  return new Float32Array(await read);
}
