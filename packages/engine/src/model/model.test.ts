// The whole model against independent PyTorch references: a plain-torch float64 implementation (scripts/fixtures.py:
// llama, qwen2, qwen3) and transformers' own classes (scripts/fixtures_hf.py: Mistral with and without a sliding
// window, Gemma 3, SmolLM2, Llama-3.2): prefill logits, token-by-token decode through the KV cache, and two
// sequences batched in one step; and inference's fused layer (decodeLayer), and the layer with q|k|v and gate|up as
// one product each, against one dispatch per op, with a LoRA adapter of per-module ranks on every projection.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { createDevice, getDevice, isCpuDevice, type Gpu } from "@webart/gpu";
import { assertClose, kernelsDispatched } from "@webart/gpu/check";
import { isIgnorableTensor, parseConfig, tensorShapes } from "../config/index.ts";
import { memorySource, modelFiles, readJson, WeightReader } from "../weights/index.ts";
import { Rng } from "@webart/gpu";
import { KvCache } from "./kv.ts";
import { ModelRunner } from "./runner.ts";
import type { SampleSpec } from "../generate/scheduler.ts";
import { LoraState, validateLoraConfig } from "./lora.ts";
import { Model } from "./model.ts";
import { freeWeights, oneBuffer, uploadWeights } from "./weights.ts";
import { planMemory } from "../plan.ts";

const FIX = join(import.meta.dirname, "../../fixtures");

type SampleSpecMask = SampleSpec["mask"];

async function refTensors(name: string): Promise<Map<string, Float32Array>> {
  const bytes = readFileSync(join(FIX, name, "reference.safetensors"));
  const r = await WeightReader.fromSource(memorySource(new Uint8Array(bytes), "reference.safetensors"));
  const out = new Map<string, Float32Array>();
  for (const n of r.tensorsInfo.keys()) {
    const t = await r.read(n);
    out.set(n, new Float32Array(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength / 4));
  }
  return out;
}

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

async function load(name: string, g: Gpu = gpu): Promise<Model> {
  // The fixtures have no tokenizer, so the pieces openModel uses are called one by one.
  const files = await modelFiles(join(FIX, name));
  const config = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const w = await uploadWeights(
    g,
    config,
    reader.tensors(tensorShapes(config), { ignore: (n) => isIgnorableTensor(config, n) }),
  );
  await reader.close();
  return new Model(g, config, w);
}

/** Dispatches the last run() recorded. */
let lastDispatches = 0;

/** Feeds tokens (slot, pos, id) through the model and returns logits (rows, V) for every fed token. */
async function run(
  model: Model,
  kv: KvCache,
  toks: { slot: number; pos: number; id: number }[],
  decode = false,
): Promise<Float32Array> {
  const gpu = model.gpu;
  const N = toks.length;
  const V = model.config.vocabSize;
  const rec = gpu.recorder();
  kv.flush(rec);
  const ids = gpu.upload(Uint32Array.from(toks.map((t) => t.id)));
  const slotPos = gpu.upload(Uint32Array.from(toks.flatMap((t) => [t.slot, t.pos])));
  const maxLen = Math.max(...toks.map((t) => t.pos + 1));
  const { x } = model.forward(rec, ids, N, { kind: "cache", kv, slotPos, decode, maxLen }, false);
  const rows = gpu.upload(Uint32Array.from(toks.map((_, i) => i)));
  const logits = gpu.buffer(N * V * 4);
  model.logits(rec, x, N, rows, N, logits);
  const out = rec.read(logits, N * V * 4);
  gpu.release(ids, slotPos, x, rows, logits);
  lastDispatches = rec.dispatches;
  await rec.submit();
  return new Float32Array(await out);
}

/** Feeds each group of tokens in turn through a fresh KV cache of `slots` (the first a prefill, then decode steps):
 *  each step's logits and dispatches. */
async function runSteps(model: Model, toks: { slot: number; pos: number; id: number }[][], slots: number) {
  const kv = new KvCache(gpu, model.config, slots, 32);
  const out: Float32Array[] = [];
  const dispatches: number[] = [];
  try {
    for (const [i, t] of toks.entries()) {
      out.push(await run(model, kv, t, i > 0));
      dispatches.push(lastDispatches);
    }
  } finally {
    kv.dispose();
  }
  return { out, dispatches };
}

/** A fixture's prefill prompt's logits on `m`, in slot 1 of a fresh cache. */
async function prefillLogits(m: Model, ids: number[]): Promise<Float32Array> {
  const kv = new KvCache(m.gpu, m.config, 2, 32);
  try {
    return await run(
      m,
      kv,
      ids.map((id, pos) => ({ slot: 1, pos, id })),
    );
  } finally {
    kv.dispose();
  }
}

/** A fixture's decode logits on `m`: its prompt's last row, then its steps one token at a time through the KV cache. */
async function fixtureDecodeLogits(m: Model, d: { prompt: number[]; steps: number[] }): Promise<Float32Array> {
  const kv = new KvCache(m.gpu, m.config, 1, 32);
  const { prompt, steps } = d;
  const V = m.config.vocabSize;
  const rows: Float32Array[] = [];
  try {
    const first = await run(
      m,
      kv,
      prompt.map((id, pos) => ({ slot: 0, pos, id })),
    );
    rows.push(first.subarray((prompt.length - 1) * V));
    for (let i = 0; i < steps.length; i++) {
      rows.push(await run(m, kv, [{ slot: 0, pos: prompt.length + i, id: steps[i] }], true));
    }
  } finally {
    kv.dispose();
  }
  const got = new Float32Array(rows.length * V);
  rows.forEach((r, i) => got.set(r, i * V));
  return got;
}

/** runSteps in one slot with this adapter on (or none), merged into the weights or not; the model left without it. */
async function runStepsWith(
  model: Model,
  toks: { slot: number; pos: number; id: number }[][],
  lora: LoraState | undefined,
  merge: boolean,
) {
  model.mergeLora = merge;
  model.lora = lora;
  try {
    return await runSteps(model, toks, 1);
  } finally {
    model.mergeLora = false;
    model.lora = undefined;
  }
}

describe.each([
  ["llama-tiny", 2e-4],
  ["qwen2-tiny", 2e-4],
  ["qwen3-tiny", 2e-4],
  ["qwen3-tiny-bf16", 2e-4],
  // Against transformers' own classes (scripts/fixtures_hf.py).
  ["mistral-tiny", 2e-4],
  ["mistral-tiny-window", 2e-4],
  ["gemma3-tiny", 2e-4],
  ["smollm2-tiny", 2e-4],
  ["llama32-tiny", 2e-4],
])("%s against PyTorch", (name, atol) => {
  let model: Model;
  let ref: Map<string, Float32Array>;
  let json: {
    prefill: { ids: number[] };
    decode: { prompt: number[]; steps: number[] };
    batch: { sequences: number[][] };
  };
  beforeAll(async () => {
    model = await load(name);
    ref = await refTensors(name);
    json = JSON.parse(readFileSync(join(FIX, name, "reference.json"), "utf8"));
  });

  /** The prefill prompt's logits on `m` (these weights, perhaps other tuning). */
  const prefill = (m: Model) => prefillLogits(m, json.prefill.ids);

  it("prefill logits", async () => {
    assertClose(`${name} prefill`, await prefill(model), ref.get("prefill.logits")!, { atol, rtol: 1e-4 });
  });

  it("prefill logits where tuning has steps of more than 8 rows run as matmuls (decodeRows 8)", async () => {
    // The same weights; 12 prompt tokens take the layer one op at a time, products as matmuls, the head's norm apart.
    const m8 = new Model(gpu, model.config, model.weights, { decodeRows: 8 });
    expect(m8.decodeRows).toBe(8);
    try {
      expect(json.prefill.ids.length).toBeGreaterThan(8);
      const got = await prefill(m8);
      assertClose(`${name} prefill (decodeRows 8)`, got, ref.get("prefill.logits")!, { atol, rtol: 1e-4 });
    } finally {
      m8.releaseTables();
    }
  });

  it("prefill logits where tuning runs matvecs of more than 4 rows as the columns variant (columnsAbove 4)", async () => {
    // The same weights; the prompt's tokens run decodeLayer, its matvecs (q|k|v, o, gate|up, down, head) on the
    // variant for many rows, as a GPU's start-up tuning may choose.
    const mc = new Model(gpu, model.config, model.weights, { matvec: { columnsAbove: 4 } });
    try {
      expect(json.prefill.ids.length).toBeGreaterThan(4);
      const { result: got, names } = await kernelsDispatched(() => prefill(mc));
      expect(names).toContain("matvec_forward_columns");
      assertClose(`${name} prefill (columns)`, got, ref.get("prefill.logits")!, { atol, rtol: 1e-4 });
    } finally {
      mc.releaseTables();
    }
  });

  /** The decode fixture's logits on `m`. */
  const decodeLogits = (m: Model) => fixtureDecodeLogits(m, json.decode);

  it("decode through the KV cache, token by token", async () => {
    assertClose(`${name} decode`, await decodeLogits(model), ref.get("decode.logits")!, { atol, rtol: 1e-4 });
  });

  it("prefill and decode with the lanes attention family, as a GPU's start-up tuning may choose", async () => {
    // The same weights; the prompt through the prefill kernel, each step through the decode kernel of the family.
    const lanes = { variant: "lanes", profile: "gpu" } as const;
    const ml = new Model(gpu, model.config, model.weights, { attention: { train: lanes, decode: lanes } });
    try {
      const { result: got, names } = await kernelsDispatched(() => decodeLogits(ml));
      expect(names).toContain("attention_forward_lanes");
      expect(names).toContain("attention_decode_lanes");
      assertClose(`${name} decode (lanes)`, got, ref.get("decode.logits")!, { atol, rtol: 1e-4 });
    } finally {
      ml.releaseTables();
    }
  });

  it("two sequences of different lengths in one batch", async () => {
    const kv = new KvCache(gpu, model.config, 3, 16);
    const [a, b] = json.batch.sequences;
    const toks = [...a.map((id, pos) => ({ slot: 2, pos, id })), ...b.map((id, pos) => ({ slot: 0, pos, id }))];
    const got = await run(model, kv, toks);
    const V = model.config.vocabSize;
    assertClose(`${name} batch 0`, got.subarray(0, a.length * V), ref.get("batch.0.logits")!, { atol, rtol: 1e-4 });
    assertClose(`${name} batch 1`, got.subarray(a.length * V), ref.get("batch.1.logits")!, { atol, rtol: 1e-4 });
    kv.dispose();
    expect(gpu.errors).toEqual([]);
  });

  it("decodeLayer matches one dispatch per op, with LoRA (ranks per module) on every projection", async () => {
    // q, k, v share a buffer (and their biases), as do gate and up, each at a 256-byte aligned offset.
    const L = model.weights.layers[0];
    expect(oneBuffer(L.q, L.k, L.v) && oneBuffer(L.gate, L.up)).toBe(true);
    const bytes = (m: { offset: number; dtype: string }) => m.offset * (m.dtype === "f32" ? 4 : 2);
    for (const m of [L.q, L.k, L.v, L.gate, L.up]) expect(bytes(m) % 256).toBe(0);
    if (L.qBias) expect(oneBuffer(L.qBias, L.kBias!, L.vBias!)).toBe(true);
    const lora = new LoraState(
      gpu,
      model.config,
      validateLoraConfig({ rank: 4, alpha: 8, rankPattern: { k_proj: 2, up_proj: 3, down_proj: 1 } }),
    );
    lora.write(new Rng(5).f32(lora.size, -0.2, 0.2));
    const { prompt, steps } = json.decode;
    const toks = [
      prompt.map((id, pos) => ({ slot: 1, pos, id })),
      ...steps.slice(0, 2).map((id, i) => [{ slot: 1, pos: prompt.length + i, id }]),
    ];
    // "products": the layer that prefill past DECODE_ROWS tokens runs, with q|k|v and gate|up as one matmul each.
    const decode = async (fuse: boolean | "products", withLora: boolean) => {
      model.fuse(fuse !== false);
      if (fuse === "products") model.fuseDecode = false;
      model.lora = withLora ? lora : undefined;
      try {
        return await runSteps(model, toks, 2);
      } finally {
        model.fuse(true);
        model.lora = undefined;
      }
    };
    for (const withLora of [false, true]) {
      const perOp = await decode(false, withLora);
      const fused = await decode(true, withLora);
      const products = await decode("products", withLora);
      perOp.out.forEach((want, i) => assertClose(`${name} step ${i}`, fused.out[i], want, { atol: 1e-4, rtol: 1e-4 }));
      perOp.out.forEach((want, i) =>
        assertClose(`${name} products ${i}`, products.out[i], want, { atol: 1e-4, rtol: 1e-4 }),
      );
      expect(products.dispatches[0]).toBeLessThan(perOp.dispatches[0]); // gate|up at least
      // Fewer than half the dispatches once the layers dominate; Gemma's two branch norms are a dispatch each, their
      // residual adds in the same pass.
      const L = model.config.numLayers;
      const branchNorms = model.config.sandwichNorms ? 2 : 0;
      expect(fused.dispatches[1]).toBeLessThanOrEqual(((withLora ? 10 : 6) + branchNorms) * L + 5);
      expect(fused.dispatches[1]).toBeLessThan(perOp.dispatches[1]);
    }
    lora.dispose();
    expect(gpu.errors).toEqual([]);
  });

  it("inference with the adapter merged into f32 weights: the adapter's logits, the base model's dispatches", async () => {
    const lora = new LoraState(
      gpu,
      model.config,
      validateLoraConfig({ rank: 4, alpha: 8, rankPattern: { v_proj: 2 } }),
    );
    lora.write(new Rng(7).f32(lora.size, -0.2, 0.2));
    const { prompt, steps } = json.decode;
    const toks = [
      prompt.map((id, pos) => ({ slot: 0, pos, id })),
      ...steps.slice(0, 2).map((id, i) => [{ slot: 0, pos: prompt.length + i, id }]),
    ];
    const decode = (merge: boolean, withLora = true) => runStepsWith(model, toks, withLora ? lora : undefined, merge);
    try {
      const want = await decode(false);
      const base = await decode(false, false);
      let merged = await decode(true);
      want.out.forEach((w, i) => assertClose(`${name} merged ${i}`, merged.out[i], w, { atol: 1e-4, rtol: 1e-4 }));
      // The steps take the base model's dispatches (16-bit weights into an f32 copy: the steps are within decodeRows);
      // the first step merges the adapter in first, a dispatch a target.
      expect(toks.every((t) => t.length <= model.decodeRows)).toBe(true);
      expect(merged.dispatches).toEqual(base.dispatches.map((d, i) => d + (i ? 0 : lora.entries.length)));
      expect(model.runsMerged).toBe(false); // the adapter detached
      // The adapter changes: the merged weights follow it.
      lora.write(new Rng(8).f32(lora.size, -0.2, 0.2));
      const moved = await decode(false);
      merged = await decode(true);
      moved.out.forEach((w, i) =>
        assertClose(`${name} merged after a change ${i}`, merged.out[i], w, { atol: 1e-4, rtol: 1e-4 }),
      );
      expect(moved.out[0]).not.toEqual(want.out[0]);
      // Switched off (reference logprobs), the base weights themselves.
      lora.enabled = false;
      model.mergeLora = true;
      model.lora = lora;
      expect(model.runsMerged).toBe(false);
      model.lora = undefined;
    } finally {
      model.releaseMerged();
      lora.dispose();
    }
    expect(gpu.errors).toEqual([]);
  });
});

/** A fixture on a device of its own (its pipelines new), with a rank-4 adapter of random values on every target. */
async function freshWithAdapter(name: string, seed: number): Promise<{ g: Gpu; model: Model; lora: LoraState }> {
  const g = await createDevice();
  const model = await load(name, g);
  const lora = new LoraState(g, model.config, validateLoraConfig({ rank: 4, alpha: 8 }));
  lora.write(new Rng(seed).f32(lora.size, -0.2, 0.2));
  model.lora = lora;
  return { g, model, lora };
}

describe("an adapter merged into the weights", () => {
  it("is merged in the forward's own command stream: a first use on a fresh device, in a prefill that submits part-way", async () => {
    // On a fresh device the merge kernel's pipeline is new, and a long prefill submits part-way (flushIfPending): a
    // merge submitted apart was overtaken there, and the layers ran on the copy before it was filled.
    const { g, model, lora } = await freshWithAdapter("llama-tiny", 9);
    const T = 1024;
    const toks = Array.from({ length: T }, (_, pos) => ({ slot: 0, pos, id: (pos * 7 + 3) % model.config.vocabSize }));
    const logits = async (merge: boolean) => {
      model.mergeLora = merge;
      const kv = new KvCache(g, model.config, 1, T);
      const rec = g.recorder();
      const ids = g.upload(Uint32Array.from(toks.map((t) => t.id)));
      const slotPos = g.upload(Uint32Array.from(toks.flatMap((t) => [t.slot, t.pos])));
      const { x } = model.forward(rec, ids, T, { kind: "cache", kv, slotPos, decode: false, maxLen: T }, false);
      const flushes = rec.flushes;
      const rows = g.upload(Uint32Array.from([T - 1]));
      const out = g.buffer(model.config.vocabSize * 4);
      model.logits(rec, x, T, rows, 1, out);
      const read = rec.read(out, model.config.vocabSize * 4);
      g.release(ids, slotPos, x, rows, out);
      await rec.submit();
      kv.dispose();
      return { logits: new Float32Array(await read), flushes };
    };
    const merged = await logits(true);
    expect(merged.flushes).toBeGreaterThan(0); // the forward did submit part-way
    const apart = await logits(false);
    assertClose("merged on first use", merged.logits, apart.logits, { atol: 1e-4, rtol: 1e-4 });
    // With tensor cores (f16 operands) an f32 model merges only for the steps whose layers run as matvecs.
    model.mergeLora = true;
    model.tensorCores = true;
    expect([model.runsMergedAt(1), model.runsMergedAt(model.decodeRows + 1)]).toEqual([true, false]);
    model.tensorCores = false;
    expect(model.runsMergedAt(model.decodeRows + 1)).toBe(true);
    model.releaseMerged();
    lora.dispose();
    expect(g.errors).toEqual([]);
  });
});

describe("an adapter merged into 16-bit weights", () => {
  it("runs steps of up to decodeRows rows on an f32 copy, longer ones with the terms apart; the plan counts the copy", async () => {
    // qwen3-tiny-bf16 with decodeRows 8: a 12-token prefill keeps the LoRA terms apart, the decode steps run merged.
    // The adapter leaves k, up and down out: their copies are converted (rank 0), and q|k|v stay one matvec.
    const base = await load("qwen3-tiny-bf16");
    const model = new Model(gpu, base.config, base.weights, { decodeRows: 8 });
    const cfg = validateLoraConfig({ rank: 4, alpha: 8, targets: ["q", "v", "o", "gate"] });
    const lora = new LoraState(gpu, model.config, cfg);
    lora.write(new Rng(5).f32(lora.size, -0.2, 0.2));
    const V = model.config.vocabSize;
    const toks = [
      Array.from({ length: 12 }, (_, pos) => ({ slot: 0, pos, id: (pos * 7 + 1) % V })),
      ...[12, 13, 14].map((pos) => [{ slot: 0, pos, id: (pos * 5 + 3) % V }]),
    ];
    const decode = (merge: boolean, withLora = true) => runStepsWith(model, toks, withLora ? lora : undefined, merge);
    try {
      const apart = await decode(false);
      const none = await decode(false, false);
      const merged = await decode(true);
      expect(model.runsMergedAt(12)).toBe(false);
      expect(model.runsMergedAt(1)).toBe(false); // the adapter detached
      // Steps whose layers do not run as matvecs keep the terms apart: decodeLayer off, or past decodeRows. On tensor
      // cores an f32 model's longer steps too (f16 operands would round the merged weights).
      model.lora = lora;
      model.mergeLora = true;
      expect([model.runsMergedAt(1), model.runsMergedAt(8), model.runsMergedAt(9)]).toEqual([true, true, false]);
      model.fuseDecode = false;
      expect(model.runsMergedAt(1)).toBe(false);
      model.fuseDecode = true;
      model.lora = undefined;
      merged.out.forEach((o, i) => assertClose(`bf16 merged ${i}`, o, apart.out[i], { atol: 1e-4, rtol: 1e-4 }));
      expect(merged.out[0]).toEqual(apart.out[0]); // the prefill: the same kernels
      expect(merged.out[1]).not.toEqual(none.out[1]);
      expect(merged.dispatches[0]).toBe(apart.dispatches[0]);
      // The first decode step: the base model's dispatches, and the merge's (a dispatch a target in each layer:
      // merged or converted).
      const L = model.config.numLayers;
      expect(merged.dispatches[1]).toBe(none.dispatches[1] + 7 * L);
      expect(merged.dispatches.slice(2)).toEqual(none.dispatches.slice(2));
      // What the plan counts for the copy is what it holds.
      const setup = { weightBytes: 2, kvSlots: 1, kvContext: 32, prefillChunk: 16, vocabChunk: V, lora: cfg } as const;
      const planned =
        planMemory(model.config, { ...setup, mergeLora: true }).lora - planMemory(model.config, setup).lora;
      expect(model.mergedBytes).toBeGreaterThan(0);
      expect(model.mergedBytes).toBe(planned);
    } finally {
      model.releaseMerged();
      lora.dispose();
      base.releaseTables();
      model.releaseTables();
      freeWeights(gpu, base.weights);
    }
    expect(gpu.errors).toEqual([]);
  });
  it("does not merge where a group's f32 copy would pass a storage binding, and the plan counts that binding", async () => {
    // 48 KiB bindings: qwen3-tiny-bf16's q|k|v and gate|up groups (32 KiB in bf16) fit, their f32 copies (64 KiB) do not.
    const small = await createDevice({ limitOverrides: { maxStorageBufferBindingSize: 48 * 1024 } });
    const model = await load("qwen3-tiny-bf16", small);
    const L = model.weights.layers[0];
    expect(oneBuffer(L.q, L.k, L.v) && oneBuffer(L.gate, L.up)).toBe(true);
    const cfg = validateLoraConfig({ rank: 4, alpha: 8 });
    const lora = new LoraState(small, model.config, cfg);
    model.lora = lora;
    model.mergeLora = true;
    expect(model.runsMerged).toBe(false);
    const V = model.config.vocabSize;
    const setup = { weightBytes: 2, kvSlots: 1, kvContext: 32, prefillChunk: 16, vocabChunk: V, lora: cfg } as const;
    expect(planMemory(model.config, setup).largestBinding).toBeLessThanOrEqual(48 * 1024);
    expect(planMemory(model.config, { ...setup, mergeLora: true }).largestBinding).toBe(64 * 1024);
    lora.dispose();
    small.destroy();
  });
});

describe.each(["qwen3-tiny-bf16", "gemma3-tiny", "qwen2-tiny"])(
  "%s on a device treated as a GPU (DeviceOptions.asGpu): a GPU's layouts and defaults, untuned, against PyTorch",
  (name) => {
    // Kernels and defaults that CPU devices never run unless a test forces them one by one (a GPU's layouts, its
    // part-way submits, ...), together, as a GPU without start-up tuning runs them.
    let g: Gpu;
    let model: Model;
    let ref: Map<string, Float32Array>;
    let json: { prefill: { ids: number[] }; decode: { prompt: number[]; steps: number[] } };
    beforeAll(async () => {
      g = await getDevice({ asGpu: true });
      model = await load(name, g);
      ref = await refTensors(name);
      json = JSON.parse(readFileSync(join(FIX, name, "reference.json"), "utf8"));
      return () => {
        model.releaseTables();
        freeWeights(g, model.weights);
      };
    });

    it("prefill logits, and decode through the KV cache token by token", async () => {
      expect(isCpuDevice(g)).toBe(false);
      expect(model.submitLayers).toBeGreaterThan(0);
      const { result, names } = await kernelsDispatched(async () => ({
        pre: await prefillLogits(model, json.prefill.ids),
        decode: await fixtureDecodeLogits(model, json.decode),
      }));
      if (model.config.qkNorm) expect(names).toContain("rope_qkv_wide"); // RoPE's GPU layout: a workgroup a head row
      const tol = { atol: 2e-4, rtol: 1e-4 };
      assertClose(`${name} prefill`, result.pre, ref.get("prefill.logits")!, tol);
      assertClose(`${name} decode`, result.decode, ref.get("decode.logits")!, tol);
      expect(g.errors).toEqual([]);
    });
  },
);

/** A greedy sample of `row` at sample step `step`, on the row's own stream. */
const greedySpec = (row: number, step: number) => ({
  row,
  temperature: 0,
  topK: 0,
  topP: 1,
  seed: 1,
  step,
  stream: row,
  mask: null,
  top: 0,
});

describe("part-way submits (Model.submitLayers)", () => {
  it("give one submit's logits and samples, on a fresh device, with an adapter merged in, and in a decode run", async () => {
    // Three layers with sandwich norms; every layer submitted apart (k = 1), first on a fresh device (new pipelines),
    // the adapter's merge recorded ahead of the layers.
    const { g, model, lora } = await freshWithAdapter("gemma3-tiny", 3);
    model.mergeLora = true;
    expect(model.runsMerged).toBe(true);
    const V = model.config.vocabSize;
    const groups = [
      Array.from({ length: 7 }, (_, pos) => ({ slot: 0, pos, id: (pos * 5 + 2) % V })),
      ...[7, 8, 9].map((pos) => [{ slot: 0, pos, id: (pos * 3 + 1) % V }]),
    ];
    const steps = async (k: number) => {
      model.submitLayers = k;
      const kv = new KvCache(g, model.config, 1, 32);
      const out: Float32Array[] = [];
      const flushes: number[] = [];
      for (const [i, toks] of groups.entries()) {
        const N = toks.length;
        const rec = g.recorder();
        const ids = g.upload(Uint32Array.from(toks.map((t) => t.id)));
        const slotPos = g.upload(Uint32Array.from(toks.flatMap((t) => [t.slot, t.pos])));
        const attend = { kind: "cache", kv, slotPos, decode: i > 0, maxLen: toks[N - 1].pos + 1 } as const;
        const { x } = model.forward(rec, ids, N, attend, false);
        flushes.push(rec.flushes);
        const logits = g.buffer(V * 4);
        const rows = g.upload(Uint32Array.from([N - 1]));
        model.logits(rec, x, N, rows, 1, logits);
        const read = rec.read(logits, V * 4);
        g.release(ids, slotPos, x, rows, logits);
        await rec.submit();
        out.push(new Float32Array(await read));
      }
      kv.dispose();
      return { out, flushes };
    };
    const parts = await steps(1);
    expect(parts.flushes).toEqual([2, 2, 2, 2]); // after layers 0 and 1 (the last goes with the logits)
    const one = await steps(0);
    expect(one.flushes).toEqual([0, 0, 0, 0]);
    for (const [i, o] of one.out.entries()) expect(parts.out[i]).toEqual(o);
    // A decode run (steps submitted without waiting for the one before) against single steps, greedy.
    const spec = greedySpec;
    const decode = async (k: number, run: boolean) => {
      model.submitLayers = k;
      const runner = new ModelRunner(model, 2, 32);
      try {
        const prompt = { ids: Uint32Array.from([5, 9, 2, 7]), slots: Uint32Array.from([0, 0, 1, 1]) };
        const first = await runner.step({ ...prompt, pos: Uint32Array.from([0, 1, 0, 1]) }, [spec(1, 0), spec(3, 0)]);
        const tokens = { ids: first.ids, slots: Uint32Array.from([0, 1]), pos: Uint32Array.from([2, 2]) };
        if (run) return await runner.decode(tokens, [spec(0, 1), spec(1, 1)], 4); // (awaited before dispose)
        const out = [];
        for (let j = 0; j < 4; j++) {
          const pos = tokens.pos.map((p) => p + j);
          const r = await runner.step({ ...tokens, pos }, [spec(0, 1 + j), spec(1, 1 + j)]);
          out.push(r);
          tokens.ids = r.ids;
        }
        return out;
      } finally {
        runner.dispose();
      }
    };
    const inRun = await decode(1, true);
    const single = await decode(0, false);
    expect(inRun.map((r) => [...r.ids])).toEqual(single.map((r) => [...r.ids]));
    expect(inRun.map((r) => [...r.logprobs])).toEqual(single.map((r) => [...r.logprobs]));
    model.releaseMerged();
    lora.dispose();
    expect(g.errors).toEqual([]);
    g.destroy();
  });
});

describe("a step that fails part-way", () => {
  it("leaves its KV slot copies for the next step only if no part of it reached the device", async () => {
    const model = await load("llama-tiny");
    const spec = (row: number, mask: SampleSpecMask = null) => ({
      row,
      temperature: 0,
      topK: 0,
      topP: 1,
      seed: 1,
      step: 0,
      stream: 0,
      mask,
      top: 0,
    });
    const fail = () => {
      throw new Error("the constraint failed");
    };
    for (const k of [0, 1]) {
      model.submitLayers = k;
      const runner = new ModelRunner(model, 2, 16);
      runner.overlapMasks = false; // the mask is asked for in the step's own recorder, after the forward
      runner.replay = false; // a captured step never submits part-way (Recorder.capture)
      try {
        const prompt = {
          ids: Uint32Array.from([3, 5, 7]),
          slots: new Uint32Array(3),
          pos: Uint32Array.from([0, 1, 2]),
        };
        await runner.step(prompt, [spec(2)]);
        runner.copySlot(0, 1, 3);
        const next = { ids: Uint32Array.from([9]), slots: new Uint32Array(1), pos: Uint32Array.from([3]) };
        await expect(runner.step(next, [spec(0, fail)])).rejects.toThrow("the constraint failed");
        // One submit a step: nothing ran and the copy waits. A part submitted after layer 0: the copy ran with it.
        expect(runner.kv.pendingCopies).toBe(k === 0 ? 1 : 0);
      } finally {
        runner.dispose();
      }
    }
    model.submitLayers = 0;
    expect(gpu.errors).toEqual([]);
  });
});

describe("ModelRunner.encodeOnly", () => {
  it("records a step without running it: no buffer stays live, the cache is untouched, the next step is the same", async () => {
    const model = await load("llama-tiny");
    const gpu = model.gpu;
    const spec = greedySpec;
    const run = async (dry: number) => {
      const runner = new ModelRunner(model, 2, 16);
      try {
        const prompt = { ids: Uint32Array.from([5, 9, 2, 7]), slots: Uint32Array.from([0, 0, 1, 1]) };
        const first = await runner.step({ ...prompt, pos: Uint32Array.from([0, 1, 0, 1]) }, [spec(1, 0), spec(3, 0)]);
        const next = { ids: first.ids, slots: Uint32Array.from([0, 1]), pos: Uint32Array.from([2, 2]) };
        const live = gpu.pool.stats.liveBytes;
        for (let i = 0; i < dry; i++) expect(runner.encodeOnly(next, [spec(0, 1), spec(1, 1)])).toBeGreaterThan(0);
        expect(gpu.pool.stats.liveBytes).toBe(live);
        return await runner.step(next, [spec(0, 1), spec(1, 1)]);
      } finally {
        runner.dispose();
      }
    };
    const plain = await run(0);
    const after = await run(3);
    expect([...after.ids]).toEqual([...plain.ids]);
    expect([...after.logprobs]).toEqual([...plain.logprobs]);
    expect(gpu.errors).toEqual([]);
  });
});

describe("tensors over the storage-binding limit", () => {
  it("splits the embedding and the untied LM head across bindings and still matches PyTorch", async () => {
    // 40 KB bindings: qwen3-tiny's (310, 64) f32 embedding (79 KB) and LM head split in 2-3 shards each.
    const small = await createDevice({ limitOverrides: { maxStorageBufferBindingSize: 40 * 1024 } });
    const model = await load("qwen3-tiny", small);
    const embed = model.weights.embed;
    expect(embed.dtype !== "q4" && embed.shards.length).toBeGreaterThan(1);
    expect(model.weights.head.length).toBeGreaterThan(1);
    // q|k|v and gate|up (65 KB each) would not fit a binding either: each keeps its own buffer, and decode runs per op.
    const L = model.weights.layers[0];
    expect(oneBuffer(L.q, L.k) || oneBuffer(L.gate, L.up)).toBe(false);
    const ref = await refTensors("qwen3-tiny");
    const json = JSON.parse(readFileSync(join(FIX, "qwen3-tiny", "reference.json"), "utf8"));
    const kv = new KvCache(small, model.config, 1, 32);
    const saved = gpu;
    gpu = small;
    try {
      const got = await run(
        model,
        kv,
        (json.prefill.ids as number[]).map((id, pos) => ({ slot: 0, pos, id })),
      );
      assertClose("split prefill", got, ref.get("prefill.logits")!, { atol: 2e-4, rtol: 1e-4 });
    } finally {
      gpu = saved;
    }
    expect(small.errors).toEqual([]);
    small.destroy();
  });
});

describe("decode steps replayed (ModelRunner.replay, Tape)", () => {
  it("sample what the model's code records, bit for bit; capture again when the adapter, its merge or the key bound moves", async () => {
    const { g, model, lora } = await freshWithAdapter("qwen2-tiny", 5);
    const spec = (row: number, step: number) => ({
      row,
      temperature: 1,
      topK: 0,
      topP: 1,
      seed: 7,
      step,
      stream: row,
      mask: null,
      top: 0,
    });
    const specs = (step: number) => [spec(0, step), spec(1, step)];
    const run = async (replay: boolean, merge: boolean) => {
      model.mergeLora = merge;
      lora.write(new Rng(5).f32(lora.size, -0.2, 0.2));
      const runner = new ModelRunner(model, 2, 96);
      runner.replay = replay;
      const live0 = g.memory.byTag.activations ?? 0;
      const out: { ids: number[]; logprobs: number[]; dispatches: number }[] = [];
      try {
        const prompt = {
          ids: Uint32Array.from([5, 9, 2, 7, 1, 4, 8, 3]),
          slots: Uint32Array.from([0, 0, 0, 1, 1, 1, 1, 1]),
          pos: Uint32Array.from([0, 1, 2, 0, 1, 2, 3, 4]),
        };
        const first = await runner.step(prompt, [spec(2, 0), spec(7, 0)]);
        const tokens = { ids: first.ids, slots: Uint32Array.from([0, 1]), pos: Uint32Array.from([3, 5]) };
        const keep = (r: { ids: Uint32Array; logprobs: Float32Array }) =>
          out.push({ ids: [...r.ids], logprobs: [...r.logprobs], dispatches: runner.lastDispatches });
        // 40 steps one at a time (the adapter moves after 20), then 4 runs of 8 that cross the key bound of 64.
        for (let j = 1; j <= 40; j++) {
          if (j === 21) lora.write(new Rng(11).f32(lora.size, -0.2, 0.2));
          const r = await runner.step(tokens, specs(j));
          keep(r);
          tokens.ids = r.ids;
          tokens.pos = tokens.pos.map((p) => p + 1);
        }
        for (let k = 0; k < 4; k++) {
          const rs = await runner.decode(tokens, specs(41 + 8 * k), 8);
          rs.forEach(keep);
          tokens.ids = rs[7].ids;
          tokens.pos = tokens.pos.map((p) => p + 8);
        }
        expect(tokens.pos[1]).toBeGreaterThan(64);
        runner.idle();
        expect(g.memory.byTag.activations).toBe(live0); // the tape's buffers went back with it
        return { out, stats: { ...runner.tapeStats } };
      } finally {
        runner.dispose();
      }
    };
    for (const merge of [false, true]) {
      const recorded = await run(false, merge);
      const replayed = await run(true, merge);
      expect(recorded.stats).toEqual({ replays: 0, captures: 0 });
      // Captures: the first decode step, the adapter's move, the key bound's move past 64. With the merge, the step
      // after the adapter's move makes the merged weights again and is not kept (its tape would merge again each
      // time), so the next one captures too. (The prompt's step made them first.)
      expect(replayed.stats.captures).toBe(merge ? 4 : 3);
      expect(replayed.stats.replays).toBe(72 - replayed.stats.captures);
      expect(replayed.out.map((o) => o.ids)).toEqual(recorded.out.map((o) => o.ids));
      expect(replayed.out.map((o) => o.logprobs)).toEqual(recorded.out.map((o) => o.logprobs));
      // The same dispatches, as many of them, in replays.
      expect(replayed.out.map((o) => o.dispatches)).toEqual(recorded.out.map((o) => o.dispatches));
    }
    model.releaseMerged();
    lora.dispose();
    expect(g.errors).toEqual([]);
    g.destroy();
  });
});

describe("replayed decode steps submit part-way (Tape parts)", () => {
  it("where the recorded step does, with the same samples; once with holdParts; captured again when submitLayers moves", async () => {
    const g = await createDevice();
    const model = await load("gemma3-tiny", g); // 3 layers: submitting after every layer gives 2 parts a step
    const spec = (row: number, step: number) => ({ ...greedySpec(row, step), temperature: 1, seed: 3 });
    const run = async (replay: boolean, holdParts: boolean) => {
      model.submitLayers = 1;
      const runner = new ModelRunner(model, 2, 64);
      runner.replay = replay;
      runner.holdParts = holdParts;
      const out: { ids: number[]; logprobs: number[]; flushes: number }[] = [];
      try {
        const prompt = { ids: Uint32Array.from([5, 9, 2, 7, 1]), slots: Uint32Array.from([0, 0, 1, 1, 1]) };
        const first = await runner.step({ ...prompt, pos: Uint32Array.from([0, 1, 0, 1, 2]) }, [
          spec(1, 0),
          spec(4, 0),
        ]);
        const tokens = { ids: first.ids, slots: Uint32Array.from([0, 1]), pos: Uint32Array.from([2, 3]) };
        for (let j = 1; j <= 12; j++) {
          if (j === 7) model.submitLayers = 4; // the GPU default: a part after the first layer alone, here
          const r = await runner.step(tokens, [spec(0, j), spec(1, j)]);
          out.push({ ids: [...r.ids], logprobs: [...r.logprobs], flushes: runner.lastFlushes });
          tokens.ids = r.ids;
          tokens.pos = tokens.pos.map((p) => p + 1);
        }
        // Then two runs of 8 (each step submitted as soon as it is encoded, parts of the next ahead of its end).
        for (let k = 0; k < 2; k++) {
          const rs = await runner.decode(tokens, [spec(0, 13 + 8 * k), spec(1, 13 + 8 * k)], 8);
          for (const r of rs) out.push({ ids: [...r.ids], logprobs: [...r.logprobs], flushes: -1 });
          out[out.length - 1].flushes = runner.lastFlushes;
          tokens.ids = rs[7].ids;
          tokens.pos = tokens.pos.map((p) => p + 8);
        }
        return { out, stats: { ...runner.tapeStats } };
      } finally {
        runner.dispose();
        model.submitLayers = 0;
      }
    };
    const recorded = await run(false, false);
    const replayed = await run(true, false);
    const held = await run(true, true);
    const run8 = (last: number) => [...new Array(7).fill(-1), last];
    expect(recorded.out.map((o) => o.flushes)).toEqual([2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, ...run8(1), ...run8(1)]);
    // A capturing step submits once (its buffers are reused within it); the steps that replay it, where it asked to.
    expect(replayed.out.map((o) => o.flushes)).toEqual([0, 2, 2, 2, 2, 2, 0, 1, 1, 1, 1, 1, ...run8(1), ...run8(1)]);
    expect(held.out.map((o) => o.flushes)).toEqual([...new Array(12).fill(0), ...run8(0), ...run8(0)]);
    expect(replayed.stats).toEqual({ captures: 2, replays: 26 }); // the first step, and the step after the move
    expect(held.stats).toEqual(replayed.stats);
    for (const r of [replayed, held]) {
      expect(r.out.map((o) => o.ids)).toEqual(recorded.out.map((o) => o.ids));
      expect(r.out.map((o) => o.logprobs)).toEqual(recorded.out.map((o) => o.logprobs));
    }
    expect(g.errors).toEqual([]);
    g.destroy();
  });
});
