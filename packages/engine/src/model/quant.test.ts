// q4 base weights (uploadWeights' quantize, EngineOptions.quantize) against the same model with each projection
// replaced by its q4 values in f32 (quantizeQ4 then dequantizeQ4 on the CPU): prefill logits through the matmuls and
// through decodeLayer's matvecs, decode steps through the KV cache, and LoRA GRPO gradients; and the weights' bytes.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu } from "@webart/gpu";
import { assertClose, kernelsDispatched } from "@webart/gpu/check";
import { dequantizeQ4, matvecRopePairs, quantizeQ4 } from "@webart/shaders";
import { isIgnorableTensor, parseConfig, tensorShapes, type ModelConfig } from "../config/index.ts";
import { memorySource, modelFiles, readJson, tensorToF32, WeightReader, type Tensor } from "../weights/index.ts";
import { randomTensors, tinyConfigJson } from "../weights/testing.ts";
import { accumulateGradients } from "../train/grpo.ts";
import { LoraState } from "./lora.ts";
import { Model } from "./model.ts";
import { prefillLogits } from "./testing.ts";
import { freeWeights, Q4_HEAD_ROWS, uploadWeights } from "./weights.ts";
import type { LoraTarget } from "../plan.ts";

const FIX = join(import.meta.dirname, "../../fixtures");
let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

/** What q4 quantizes: every matrix (the layers' projections, and the embedding and LM head where their rows are whole
 *  groups of 32); norms and biases stay as they are. */
const isProjection = (t: Tensor) =>
  t.shape.length === 2 && (t.name.startsWith("model.layers.") || t.shape[1] % 32 === 0);

/** The tensors with each projection as its q4 values in f32. */
async function* asQ4Values(tensors: AsyncIterable<Tensor>): AsyncIterable<Tensor> {
  for await (const t of tensors) {
    if (!isProjection(t)) {
      yield t;
      continue;
    }
    const f = tensorToF32({ dtype: t.dtype, bytes: t.bytes });
    const q = quantizeQ4(f, t.name);
    const d = dequantizeQ4(q.nibbles, q.scales, f.length);
    yield { name: t.name, dtype: "F32", shape: t.shape, bytes: new Uint8Array(d.buffer as ArrayBuffer) };
  }
}

/** A fixture's model: its projections quantized on upload, (reference) their q4 values uploaded as f32, or as the
 *  file has them. */
async function load(name: string, how: "q4" | "reference" | "file"): Promise<Model> {
  const files = await modelFiles(join(FIX, name));
  const config: ModelConfig = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const tensors = reader.tensors(tensorShapes(config), { ignore: (n) => isIgnorableTensor(config, n) });
  const w =
    how === "q4"
      ? await uploadWeights(gpu, config, tensors, { quantize: "q4" })
      : await uploadWeights(gpu, config, how === "file" ? tensors : asQ4Values(tensors));
  await reader.close();
  return new Model(gpu, config, w);
}

describe.each(["qwen2-tiny", "qwen3-tiny-bf16", "gemma3-tiny", "llama32-tiny"])("%s with q4 weights", (fixture) => {
  let q4: Model;
  let ref: Model;
  beforeAll(async () => {
    q4 = await load(fixture, "q4");
    ref = await load(fixture, "reference");
    return () => {
      freeWeights(gpu, q4.weights);
      freeWeights(gpu, ref.weights);
    };
  });

  it("holds its projections as q4 and computes the same logits as their values in f32", async () => {
    expect(q4.quantized).toBe(true);
    expect(
      q4.weights.layers.every((L) => [L.q, L.k, L.v, L.o, L.gate, L.up, L.down].every((W) => W.dtype === "q4")),
    ).toBe(true);
    const V = q4.config.vocabSize;
    const ids = Array.from({ length: 20 }, (_, i) => (i * 7 + 3) % V);
    // Every projection a matmul over the f16 copy (decodeRows 0); decodeLayer's matvecs over the copy (q4MatvecRows
    // 0); and the q4 stream matvec on the nibbles, where K and the offsets allow it (32-element groups).
    for (const [decodeRows, q4MatvecRows] of [
      [0, 0],
      [64, 0],
      [64, 64],
    ]) {
      q4.decodeRows = ref.decodeRows = decodeRows;
      q4.q4MatvecRows = q4MatvecRows;
      const { result: got, names } = await kernelsDispatched(() => prefillLogits(gpu, q4, ids));
      const want = await prefillLogits(gpu, ref, ids);
      const how = `decodeRows ${decodeRows}, q4MatvecRows ${q4MatvecRows}`;
      assertClose(`${fixture} logits, ${how}`, got, want, { atol: 2e-4, rtol: 2e-4 });
      // Gemma's hidden size (48) is no whole number of groups: its projections from x read the f16 copy, the down
      // projection (K = 96) the nibbles.
      const c = q4.config;
      const Ks = [c.hiddenSize, c.numHeads * c.headDim, c.intermediateSize];
      const direct = q4MatvecRows > 0 ? Ks.filter((K) => K % 32 === 0).length : 0;
      // The q|k|v matvec with RoPE in its epilogue pairs columns 16 apart at these widths: head dims under 32 read
      // the copy there.
      const ropeCopy = !c.qkNorm && matvecRopePairs("stream", "q4", c.hiddenSize, c.headDim) === 0;
      expect(names.has("q4_dequant"), how).toBe(direct < Ks.length || (direct > 0 && ropeCopy));
      expect(names.has("matvec_forward_stream"), how).toBe(direct > 0);
    }
    q4.decodeRows = ref.decodeRows = 64;
    q4.q4MatvecRows = 16;
    // The file's own weights give other logits: the check above would see a q4 value gone astray.
    const file = await load(fixture, "file");
    const a = await prefillLogits(gpu, file, ids);
    const b = await prefillLogits(gpu, q4, ids);
    freeWeights(gpu, file.weights);
    expect(a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0)).toBeGreaterThan(2e-3);
    expect(gpu.errors).toEqual([]);
  });
});

it("a q4 LM head of more rows than one f16 copy holds (Q4_HEAD_ROWS) gives the same logits, shard by shard", async () => {
  // Untied, 8300 rows: shards of 8192 and 108 where a product reads the f16 copy; one q4 matvec reads them all.
  const json = tinyConfigJson("qwen2", {
    vocab_size: 8300,
    num_hidden_layers: 1,
    hidden_size: 64,
    intermediate_size: 128,
  });
  const config = parseConfig(json);
  const tensors = randomTensors(json, "BF16", 5);
  async function* stream(): AsyncIterable<Tensor> {
    for (const t of tensors) {
      const d = t.data as Uint16Array;
      yield { name: t.name, dtype: t.dtype, shape: t.shape, bytes: new Uint8Array(d.buffer.slice(0) as ArrayBuffer) };
    }
  }
  const q4 = new Model(gpu, config, await uploadWeights(gpu, config, stream(), { quantize: "q4" }));
  const ref = new Model(gpu, config, await uploadWeights(gpu, config, asQ4Values(stream())));
  expect(q4.weights.head.length).toBe(Math.ceil(8300 / Q4_HEAD_ROWS));
  const ids = [5, 8299, 17, 4000, 8200, 1];
  for (const [decodeRows, q4MatvecRows] of [
    [0, 0],
    [64, 0],
    [64, 64],
  ]) {
    q4.decodeRows = ref.decodeRows = decodeRows;
    q4.q4MatvecRows = q4MatvecRows;
    const got = await prefillLogits(gpu, q4, ids);
    const want = await prefillLogits(gpu, ref, ids);
    assertClose(`head shards, decodeRows ${decodeRows}, q4MatvecRows ${q4MatvecRows}`, got, want, {
      atol: 2e-4,
      rtol: 2e-4,
    });
  }
  freeWeights(gpu, q4.weights);
  freeWeights(gpu, ref.weights);
  q4.releaseTables();
  ref.releaseTables();
  expect(gpu.errors).toEqual([]);
});

it("q4 weights take 4.5 bits a weight of every matrix (the embedding too); norms as the file has them", async () => {
  const q4 = await load("qwen3-tiny-bf16", "q4");
  const files = await modelFiles(join(FIX, "qwen3-tiny-bf16"));
  const config = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const w = await uploadWeights(gpu, config, reader.tensors(tensorShapes(config), { ignore: () => false }));
  await reader.close();
  let proj = 0;
  for (const [name, shape] of tensorShapes(config))
    if (isProjection({ name, shape } as Tensor)) proj += shape[0] * shape[1];
  expect(proj).toBeGreaterThan(0);
  expect(q4.weights.embed.dtype).toBe("q4");
  expect(w.bytes - q4.weights.bytes).toBe(proj * 2 - proj * (4.5 / 8));
  freeWeights(gpu, q4.weights);
  freeWeights(gpu, w);
});

it("a q4 load refuses a weight that is not finite or past q4's range, naming the tensor, and keeps nothing", async () => {
  // Quantized on the GPU (q4Quantize): the errors are read once the last tensor is in, so the whole load is refused.
  const json = tinyConfigJson("qwen2", { num_hidden_layers: 2, hidden_size: 64, intermediate_size: 128 });
  const config = parseConfig(json);
  const cases: [string, number, number, RegExp][] = [
    ["model.layers.1.mlp.up_proj.weight", 77, NaN, /model\.layers\.1\.mlp\.up_proj\.weight.*element 77 is not finite/],
    ["model.layers.0.self_attn.k_proj.weight", 3, -Infinity, /model\.layers\.0\.self_attn\.k_proj\.weight.*element 3/],
    ["model.layers.0.mlp.down_proj.weight", 5, 1e6, /model\.layers\.0\.mlp\.down_proj\.weight/],
  ];
  for (const [bad, at, value, why] of cases) {
    const tensors = randomTensors(json, "F32", 9);
    async function* stream(): AsyncIterable<Tensor> {
      for (const t of tensors) {
        const d = (t.data as Float32Array).slice();
        if (t.name === bad) d[at] = value;
        yield { name: t.name, dtype: t.dtype, shape: t.shape, bytes: new Uint8Array(d.buffer as ArrayBuffer) };
      }
    }
    const live0 = gpu.memory.liveBytes;
    await expect(uploadWeights(gpu, config, stream(), { quantize: "q4" })).rejects.toThrow(why);
    expect(gpu.memory.liveBytes, bad).toBe(live0);
  }
  expect(gpu.errors).toEqual([]);
});

describe("LoRA GRPO on a q4 base (grpo-qwen3's batch)", () => {
  it("gives the gradients of the same step on the q4 values in f32", async () => {
    const inputs = JSON.parse(readFileSync(join(FIX, "grpo-qwen3", "inputs.json"), "utf8"));
    const targets = (inputs.lora.target_modules as string[]).map((m) => m.replace("_proj", "") as LoraTarget);
    const adapter = await WeightReader.fromSource(
      memorySource(
        new Uint8Array(readFileSync(join(FIX, "grpo-qwen3", "adapter_model.safetensors"))),
        "adapter_model.safetensors",
      ),
    );
    const grads: Float32Array[] = [];
    const losses: number[] = [];
    for (const how of ["q4", "reference"] as const) {
      const model = await load(inputs.base_model, how);
      model.lora = new LoraState(gpu, model.config, { rank: inputs.lora.r, alpha: inputs.lora.alpha, targets });
      await model.lora.load(adapter);
      const seqs = (
        inputs.groups as {
          advantages: number[];
          trajectories: { ids: number[]; mask: number[]; old_logprobs: number[] }[];
        }[]
      )
        .flatMap((g) => g.trajectories.map((t, i) => ({ t, a: g.advantages[i] })))
        .filter((x) => x.a !== 0)
        .map(({ t, a }) => ({ ids: t.ids, mask: t.mask, oldLogprobs: t.old_logprobs, advantage: a, coef: 1 / 16 }));
      const r = await accumulateGradients(model, seqs, {
        loss: "ppo",
        level: "token",
        epsilon: 0.2,
        epsilonHigh: 0.2,
        beta: 0,
        microBatchTokens: 4096,
      });
      gpu.release(r.totals, r.entropyAll);
      losses.push(r.loss);
      grads.push(await gpu.readF32(model.lora.grads!, model.lora.size));
      model.lora.dispose();
      freeWeights(gpu, model.weights);
    }
    expect(Math.abs(losses[0] - losses[1])).toBeLessThan(1e-5 + 1e-4 * Math.abs(losses[1]));
    const max = grads[1].reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    expect(max).toBeGreaterThan(0);
    assertClose("LoRA gradients on q4", grads[0], grads[1], { atol: 1e-4 * max, rtol: 1e-3 });
    expect(gpu.errors).toEqual([]);
  });
});
