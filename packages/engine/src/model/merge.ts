// A LoRA adapter merged into its base model's weights, as PEFT's merge_and_unload does: each adapted projection's
// W (out, in) becomes W + scale · B·A, every other tensor stays as it is. The result is a plain checkpoint of the
// base model's family, for any tool that loads Hugging Face models (transformers, vLLM, llama.cpp's converter).
import { fromBf16, fromF16, toBf16, toF16 } from "@webart/gpu";
import { layerModule, PROJECTIONS, type ModelConfig } from "../config/index.ts";
import { safetensorsPrefix, tensorToF32, WeightReader, WeightsError } from "../weights/index.ts";
import type { Dtype } from "../weights/index.ts";
import { loraDims, LoraState, type LoraConfig } from "./lora.ts";
import { moduleLora } from "./peft.ts";

export interface MergedCheckpoint {
  /** The .safetensors file's header (with its length), for the base's tensors in the base's order. */
  prefix: Uint8Array<ArrayBuffer>;
  /** Bytes of tensor data after the prefix. */
  dataBytes: number;
  /** Tensors merged: one per adapted projection of each layer. */
  merged: number;
  /** Each tensor's bytes in the header's order, read (and merged) one at a time. */
  tensors(): AsyncGenerator<Uint8Array>;
}

/**
 * The base checkpoint `base` (every tensor, its dtype kept) with `adapter` (PEFT's names and shapes; `lora` from its
 * adapter_config.json) merged in. The product B·A is summed in f64, added to W and rounded once to W's dtype (PEFT
 * adds in the weight's dtype; in bf16 the two can differ in the last bit). Missing or misshapen adapter tensors, or a
 * projection the base lacks, are errors naming the tensor.
 */
export async function mergeAdapter(
  config: ModelConfig,
  base: WeightReader,
  lora: LoraConfig,
  adapter: WeightReader,
  metadata: Record<string, string> = {},
): Promise<MergedCheckpoint> {
  const targets = new Map<string, { layer: number; t: (typeof lora.targets)[number] }>();
  for (let layer = 0; layer < config.numLayers; layer++)
    for (const t of lora.targets) targets.set(`${layerModule(layer, PROJECTIONS[t])}.weight`, { layer, t });
  const infos = [...base.tensorsInfo.values()];
  for (const name of targets.keys())
    if (!base.tensorsInfo.has(name)) throw new WeightsError(base.name, name, "is missing: the adapter targets it");
  for (const [name, { layer, t }] of targets) {
    const { rank } = moduleLora(lora, layer, t);
    const { in: K, out: N } = loraDims(config, t);
    const want = { A: [rank, K], B: [N, rank] };
    for (const ab of ["A", "B"] as const) {
      const n = LoraState.peftName(layer, t, ab);
      const info = adapter.tensorsInfo.get(n);
      if (!info) throw new WeightsError(adapter.name, n, `is missing (the adapter's LoRA on ${name})`);
      if (info.shape.join(",") !== want[ab].join(","))
        throw new WeightsError(adapter.name, n, `has shape [${info.shape}], expected [${want[ab]}]`);
    }
    const w = base.tensorsInfo.get(name)!;
    if (w.shape.join(",") !== [N, K].join(","))
      throw new WeightsError(base.name, name, `has shape [${w.shape}], expected [${N}, ${K}]`);
  }
  const { prefix, dataBytes } = safetensorsPrefix(infos, { format: "pt", ...metadata }, base.name);
  return {
    prefix,
    dataBytes,
    merged: targets.size,
    async *tensors() {
      for (const info of infos) {
        const t = await base.read(info.name);
        const at = targets.get(info.name);
        if (!at) {
          yield t.bytes;
          continue;
        }
        const { rank, scale } = moduleLora(lora, at.layer, at.t);
        const [N, K] = info.shape;
        const a = tensorToF32(await adapter.read(LoraState.peftName(at.layer, at.t, "A")));
        const b = tensorToF32(await adapter.read(LoraState.peftName(at.layer, at.t, "B")));
        yield mergeRows(t.dtype, t.bytes, N, K, rank, a, b, scale);
      }
    },
  };
}

/** W (N, K) of `dtype` plus scale · B (N, R) · A (R, K), a row at a time, back in `dtype`. */
function mergeRows(
  dtype: Dtype,
  bytes: Uint8Array<ArrayBuffer>,
  N: number,
  K: number,
  R: number,
  a: Float32Array,
  b: Float32Array,
  scale: number,
): Uint8Array {
  const out = new Uint8Array(bytes.byteLength);
  const f32 = dtype === "F32" ? new Float32Array(bytes.buffer, 0, N * K) : undefined;
  const h16 = dtype === "F32" ? undefined : new Uint16Array(bytes.buffer, 0, N * K);
  const o32 = f32 && new Float32Array(out.buffer);
  const o16 = h16 && new Uint16Array(out.buffer);
  const from = dtype === "BF16" ? fromBf16 : fromF16;
  const to = dtype === "BF16" ? toBf16 : toF16;
  const row = new Float64Array(K);
  for (let n = 0; n < N; n++) {
    row.fill(0);
    for (let r = 0; r < R; r++) {
      const c = b[n * R + r];
      if (c === 0) continue;
      const ar = r * K;
      for (let k = 0; k < K; k++) row[k] += c * a[ar + k];
    }
    const base = n * K;
    if (o32) for (let k = 0; k < K; k++) o32[base + k] = f32![base + k] + scale * row[k];
    else for (let k = 0; k < K; k++) o16![base + k] = to(from(h16![base + k]) + scale * row[k]);
  }
  return out;
}
