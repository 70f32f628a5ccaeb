// An adapter merged into its base model's weights (mergeAdapter): PEFT's own adapter merged into its base gives the
// logits PEFT computed with the adapter apart; a 16-bit base keeps its dtype, each merged weight the nearest value to
// W + scale·B·A; a missing adapter tensor is named.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { fromBf16, getDevice, Rng, type Gpu } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { isIgnorableTensor, parseConfig, tensorShapes, type ModelConfig } from "../config/index.ts";
import { memorySource, modelFiles, readJson, tensorToF32, WeightReader, writeSafetensors } from "../weights/index.ts";
import { randomTensors, tinyConfigJson } from "../weights/testing.ts";
import { LoraState, validateLoraConfig, type LoraConfig } from "./lora.ts";
import { mergeAdapter, type MergedCheckpoint } from "./merge.ts";
import { Model } from "./model.ts";
import { prefillLogits } from "./testing.ts";
import { moduleLora, readAdapterConfig } from "./peft.ts";
import { uploadWeights } from "./weights.ts";

const FIX = join(import.meta.dirname, "../../fixtures");
let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

/** The merged checkpoint as one file's bytes. */
async function bytesOf(m: MergedCheckpoint): Promise<Uint8Array> {
  const out = new Uint8Array(m.prefix.byteLength + m.dataBytes);
  out.set(m.prefix);
  let at = m.prefix.byteLength;
  for await (const t of m.tensors()) {
    out.set(t, at);
    at += t.byteLength;
  }
  expect(at).toBe(out.byteLength);
  return out;
}

async function modelOf(config: ModelConfig, file: Uint8Array): Promise<Model> {
  const reader = await WeightReader.fromSource(memorySource(file, "model.safetensors"));
  const ignore = (n: string) => isIgnorableTensor(config, n);
  return new Model(gpu, config, await uploadWeights(gpu, config, reader.tensors(tensorShapes(config), { ignore })));
}

const logits = (model: Model, ids: number[]) => prefillLogits(gpu, model, ids);

describe("mergeAdapter", () => {
  it("PEFT's adapter (rank_pattern, alpha_pattern, rsLoRA) merged into its base gives PEFT's logits", async () => {
    const dir = join(FIX, "peft-llama");
    const ref = JSON.parse(readFileSync(join(dir, "reference.json"), "utf8")) as { ids: number[] };
    const want = await WeightReader.fromSource(
      memorySource(readFileSync(join(dir, "reference.safetensors")), "reference.safetensors"),
    );
    const files = await modelFiles(join(FIX, "llama-tiny"));
    const config = parseConfig((await readJson(files, "config.json"))!);
    const lora = readAdapterConfig(JSON.parse(readFileSync(join(dir, "adapter_config.json"), "utf8")), "peft-llama");
    const adapter = await WeightReader.fromSource(
      memorySource(readFileSync(join(dir, "adapter_model.safetensors")), "adapter_model.safetensors"),
    );
    const base = await WeightReader.open(files);
    const m = await mergeAdapter(config, base, lora, adapter);
    expect(m.merged).toBe(config.numLayers * 7);
    const model = await modelOf(config, await bytesOf(m));
    expect(model.lora).toBeUndefined();
    assertClose("merged peft-llama", await logits(model, ref.ids), tensorToF32(await want.read("logits")), {
      atol: 2e-4,
      rtol: 1e-4,
    });
    // The base model alone is far from PEFT's logits: the check above sees the merged terms.
    const plain = await modelOf(config, readFileSync(join(FIX, "llama-tiny/model.safetensors")));
    const ref32 = tensorToF32(await want.read("logits"));
    const diff = (await logits(plain, ref.ids)).reduce((d, v, i) => Math.max(d, Math.abs(v - ref32[i])), 0);
    expect(diff).toBeGreaterThan(1e-2);
    model.dispose();
    plain.dispose();
  });

  it("a bf16 base stays bf16, each merged weight the nearest bf16 to W + scale·B·A; other tensors unchanged", async () => {
    const dims = {
      hidden_size: 64,
      intermediate_size: 128,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      head_dim: 16,
    };
    const json = tinyConfigJson("qwen3", { ...dims, num_hidden_layers: 2, tie_word_embeddings: true });
    const config = parseConfig(json);
    const tensors = randomTensors(json, "BF16", 3);
    const base = await WeightReader.fromSource(memorySource(writeSafetensors(tensors, { format: "pt" }), "base"));
    const lora: LoraConfig = validateLoraConfig({ rank: 4, alpha: 8, targets: ["q", "down"], useRslora: true });
    // An adapter with B not zero (PEFT's init leaves it at zero): random values, written in PEFT's names.
    const state = new LoraState(gpu, config, lora);
    state.write(new Rng(9).f32(state.size, -0.5, 0.5));
    const adapter = await WeightReader.fromSource(memorySource(await state.toSafetensors(), "adapter"));
    state.dispose();
    const m = await mergeAdapter(config, base, lora, adapter, { source: "test" });
    expect(m.merged).toBe(4);
    const out = await WeightReader.fromSource(memorySource(await bytesOf(m), "merged"));
    expect([...out.tensorsInfo.keys()]).toEqual(tensors.map((t) => t.name));
    expect(out.metadata).toEqual({ format: "pt", source: "test" });
    let checked = 0;
    for (const t of tensors) {
      const got = await out.read(t.name);
      expect(got.dtype).toBe("BF16");
      const hit = /^model\.layers\.(\d+)\.(self_attn\.q_proj|mlp\.down_proj)\.weight$/.exec(t.name);
      if (!hit) {
        expect(got.bytes).toEqual(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
        continue;
      }
      const [layer, target] = [Number(hit[1]), hit[2].endsWith("q_proj") ? ("q" as const) : ("down" as const)];
      const { rank, scale } = moduleLora(lora, layer, target);
      expect(scale).toBeCloseTo(8 / 2, 12); // rsLoRA: alpha / sqrt(r)
      const a = tensorToF32(await adapter.read(LoraState.peftName(layer, target, "A")));
      const b = tensorToF32(await adapter.read(LoraState.peftName(layer, target, "B")));
      const [N, K] = t.shape;
      const w = new Uint16Array(got.bytes.buffer, 0, N * K);
      const w0 = t.data as Uint16Array;
      let moved = 0;
      for (let i = 0; i < N * K; i += 7) {
        const [n, k] = [Math.floor(i / K), i % K];
        let d = 0;
        for (let r = 0; r < rank; r++) d += b[n * rank + r] * a[r * K + k];
        const exact = fromBf16(w0[i]) + scale * d;
        // Within half a bf16 step of the exact value (bf16 keeps 8 bits of mantissa).
        const ulp = 2 ** (Math.floor(Math.log2(Math.abs(exact))) - 7);
        expect(Math.abs(fromBf16(w[i]) - exact)).toBeLessThanOrEqual(ulp / 2 + 1e-12);
        if (w[i] !== w0[i]) moved++;
        checked++;
      }
      expect(moved).toBeGreaterThan(0);
    }
    expect(checked).toBeGreaterThan(1000);
  });

  it("an adapter that lacks a tensor, or has another rank, is refused by name", async () => {
    const json = tinyConfigJson("qwen3", { num_hidden_layers: 2 });
    const config = parseConfig(json);
    const base = await WeightReader.fromSource(
      memorySource(writeSafetensors(randomTensors(json, "BF16"), { format: "pt" }), "base"),
    );
    const lora = validateLoraConfig({ rank: 4, alpha: 8, targets: ["q", "v"] });
    const state = new LoraState(gpu, config, lora);
    const adapter = await WeightReader.fromSource(memorySource(await state.toSafetensors(), "adapter"));
    state.dispose();
    await expect(mergeAdapter(config, base, { ...lora, targets: ["q", "v", "o"] }, adapter)).rejects.toThrow(
      /adapter: .*model\.layers\.0\.self_attn\.o_proj\.lora_A\.weight.* is missing \(the adapter's LoRA on model\.layers\.0\.self_attn\.o_proj\.weight\)/,
    );
    await expect(mergeAdapter(config, base, { ...lora, rank: 8 }, adapter)).rejects.toThrow(
      /q_proj\.lora_A\.weight" has shape \[4,\d+\], expected \[8,\d+\]/,
    );
  });
});
