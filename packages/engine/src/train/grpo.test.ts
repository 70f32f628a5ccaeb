// LoRA GRPO against independent PyTorch autograd references: loss, KL, policy logprobs and every LoRA gradient for
// five loss variants, on Qwen3 and Llama tiny models (plain torch, scripts/fixtures.py) and a Gemma 3 tiny model
// (transformers' Gemma3ForCausalLM with a PEFT LoRA, scripts/fixtures_hf.py: sliding-window and global layers,
// GeGLU, four norms a layer), also with the lanes attention family; and micro-batched gradients equal to the
// single-batch gradient.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, isCpuDevice, type Gpu } from "@webart/gpu";
import { kernelsDispatched } from "@webart/gpu/check";
import { isIgnorableTensor, parseConfig, tensorShapes } from "../config/index.ts";
import { LoraState } from "../model/lora.ts";
import { Model } from "../model/model.ts";
import { freeWeights, uploadWeights } from "../model/weights.ts";
import { memorySource, modelFiles, readJson, tensorToF32, WeightReader } from "../weights/index.ts";
import type { LoraTarget } from "../plan.ts";
import { accumulateGradients, microBatches, type GrpoOptions, type TrainSequence } from "./grpo.ts";

const FIX = join(import.meta.dirname, "../../fixtures");
let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

interface Variant {
  config: {
    ratio: "token" | "sequence";
    objective: "ppo" | "cispo";
    epsilon: number;
    epsilon_high: number;
    beta: number;
    normalization: string;
    max_length?: number;
  };
  loss: number;
  policy_loss: number;
  kl: number;
  num_sequences: number;
  num_tokens: number;
  grads: string;
}

async function readAll(path: string): Promise<Map<string, Float32Array>> {
  const r = await WeightReader.fromSource(memorySource(new Uint8Array(readFileSync(path)), path));
  const out = new Map<string, Float32Array>();
  for (const n of r.tensorsInfo.keys()) {
    const t = await r.read(n);
    out.set(n, tensorToF32({ dtype: t.dtype, bytes: t.bytes }));
  }
  return out;
}

/** The fixture's model and adapter, on `g` (default: the tests' device). */
async function setup(fixture: string, g: Gpu = gpu) {
  const inputs = JSON.parse(readFileSync(join(FIX, fixture, "inputs.json"), "utf8"));
  const reference = JSON.parse(readFileSync(join(FIX, fixture, "reference.json"), "utf8"));
  const files = await modelFiles(join(FIX, inputs.base_model));
  const config = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const w = await uploadWeights(
    g,
    config,
    reader.tensors(tensorShapes(config), { ignore: (n) => isIgnorableTensor(config, n) }),
  );
  const model = new Model(g, config, w);
  const targets = (inputs.lora.target_modules as string[]).map((m) => m.replace("_proj", "") as LoraTarget);
  model.lora = new LoraState(g, config, { rank: inputs.lora.r, alpha: inputs.lora.alpha, targets });
  const adapter = await WeightReader.fromSource(
    memorySource(
      new Uint8Array(readFileSync(join(FIX, fixture, "adapter_model.safetensors"))),
      "adapter_model.safetensors",
    ),
  );
  await model.lora.load(adapter);
  return { inputs, reference, model };
}

type Traj = {
  ids: number[];
  mask: number[];
  old_logprobs: number[];
  ref_logprobs: number[];
  /** Per position, the token ids its token was drawn from (a constrained sampler's set), or null. */
  allowed?: (number[] | null)[];
};

/** The fixture's allowed sets as vocabulary bitmasks; equal sets share one mask object, as a sampler's cache does. */
function allowedMasks(allowed: (number[] | null)[] | undefined, V: number, shared: Map<string, Uint32Array>) {
  return allowed?.map((a) => {
    if (!a) return null;
    const key = a.join(",");
    let m = shared.get(key);
    if (!m) {
      m = new Uint32Array(Math.ceil(V / 32));
      for (const id of a) m[id >>> 5] |= 1 << (id & 31);
      shared.set(key, m);
    }
    return m;
  });
}

function sequences(
  inputs: { groups: { advantages: number[]; trajectories: Traj[] }[] },
  v: Variant,
  withRef: boolean,
  V = 0,
): TrainSequence[] {
  const out: TrainSequence[] = [];
  const shared = new Map<string, Uint32Array>();
  const trainable = inputs.groups
    .flatMap((g) => g.trajectories.map((t, i) => ({ t, a: g.advantages[i] })))
    .filter((x) => x.a !== 0);
  const nSeq = trainable.length;
  const nTok = trainable.reduce((s, x) => s + x.t.mask.reduce((a, b) => a + b, 0), 0);
  for (const { t, a } of trainable) {
    const n = t.mask.reduce((x, y) => x + y, 0);
    const coef =
      v.config.normalization === "token"
        ? 1 / nTok
        : v.config.normalization === "constant"
          ? 1 / (nSeq * v.config.max_length!)
          : 1 / (nSeq * n);
    out.push({
      ids: t.ids,
      mask: t.mask,
      oldLogprobs: t.old_logprobs,
      refLogprobs: withRef ? t.ref_logprobs : undefined,
      advantage: a,
      coef,
      ...(t.allowed ? { allowed: allowedMasks(t.allowed, V, shared) } : {}),
    });
  }
  return out;
}

function options(v: Variant, microBatchTokens: number): GrpoOptions {
  return {
    loss: v.config.objective,
    level: v.config.ratio,
    epsilon: v.config.epsilon,
    epsilonHigh: v.config.epsilon_high,
    beta: v.config.beta,
    microBatchTokens,
  };
}

async function gradsByName(model: Model): Promise<Map<string, Float32Array>> {
  const l = model.lora!;
  const g = await model.gpu.readF32(l.grads!, l.size);
  const R = l.config.rank;
  const out = new Map<string, Float32Array>();
  for (const e of l.entries) {
    out.set(LoraState.peftName(e.layer, e.target, "A"), g.slice(e.a, e.a + R * e.in));
    out.set(LoraState.peftName(e.layer, e.target, "B"), g.slice(e.b, e.b + R * e.out));
  }
  return out;
}

/** max |a - b| relative to the reference tensor's max |value|, over all tensors (the worst one). */
function worstRelErr(got: Map<string, Float32Array>, want: Map<string, Float32Array>): { err: number; name: string } {
  let worst = { err: 0, name: "" };
  for (const [name, w] of want) {
    const g = got.get(name);
    if (!g) throw new Error(`missing gradient ${name}`);
    let m = 0;
    let d = 0;
    for (let i = 0; i < w.length; i++) {
      m = Math.max(m, Math.abs(w[i]));
      d = Math.max(d, Math.abs(g[i] - w[i]));
    }
    const err = d / Math.max(m, 1e-12);
    if (err > worst.err) worst = { err, name };
  }
  return worst;
}

describe.each(["grpo-qwen3", "grpo-llama", "grpo-gemma3"])("%s against PyTorch autograd", (fixture) => {
  let ctx: Awaited<ReturnType<typeof setup>>;
  beforeAll(async () => void (ctx = await setup(fixture)));

  it.each(["art", "token", "dr_grpo", "gspo", "cispo"])("%s: loss, KL and LoRA gradients", async (name) => {
    const v = ctx.reference.variants[name] as Variant;
    const r = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), options(v, 4096), {
      newLogprobs: name === "art",
    });
    const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-3);
    expect(rel(r.loss, v.loss)).toBeLessThan(1e-3);
    expect(rel(r.policyLoss, v.policy_loss)).toBeLessThan(1e-3);
    expect(rel(r.kl, v.kl)).toBeLessThan(1e-3);
    expect(r.trainedTokens).toBe(v.num_tokens);
    const worst = worstRelErr(await gradsByName(ctx.model), await readAll(join(FIX, fixture, v.grads)));
    expect(worst.err, `worst gradient ${worst.name}`).toBeLessThan(1e-3);
    if (r.newLogprobs) {
      // The policy's logprobs at every trained position match the reference policy's.
      const trainable = (ctx.reference.trainable as boolean[][]).flat();
      const want = (ctx.reference.new_logprobs as number[][][]).flat().filter((_, i) => trainable[i]);
      const seqs = sequences(ctx.inputs, v, true);
      seqs.forEach((s, i) => {
        for (let t = 1; t < s.ids.length; t++) expect(Math.abs(r.newLogprobs![i][t] - want[i][t])).toBeLessThan(2e-4);
      });
    }
  });

  it("art with the lanes attention family (a GPU's start-up tuning may choose it): the same loss and gradients", async () => {
    // Forward and both backward kernels of the lanes family (subgroup lanes a row), on this device's subgroups.
    const v = ctx.reference.variants.art as Variant;
    const tuning = ctx.model.tuning;
    const before = tuning.attention;
    tuning.attention = { ...before, train: { variant: "lanes", profile: "gpu" } };
    try {
      const seqs = sequences(ctx.inputs, v, true);
      const { result: r, names } = await kernelsDispatched(() =>
        accumulateGradients(ctx.model, seqs, options(v, 4096)),
      );
      const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-3);
      expect(rel(r.loss, v.loss)).toBeLessThan(1e-3);
      expect(rel(r.kl, v.kl)).toBeLessThan(1e-3);
      const worst = worstRelErr(await gradsByName(ctx.model), await readAll(join(FIX, fixture, v.grads)));
      expect(worst.err, `worst gradient ${worst.name}`).toBeLessThan(1e-3);
      for (const k of ["attention_forward_lanes", "attention_backward_dq_lanes", "attention_backward_dkv_lanes"])
        expect(names).toContain(k);
    } finally {
      tuning.attention = before;
    }
  });

  it("computes the reference logprobs itself (adapter off) and gets the same KL", async () => {
    const v = ctx.reference.variants.art as Variant;
    const r = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, false), options(v, 4096));
    expect(Math.abs(r.kl - v.kl) / v.kl).toBeLessThan(1e-3);
  });

  /** The art variant's sequences with every untrained position but the first (it predicts nothing) anchored, the
   *  same positions as the only trained ones at advantage 0 (their KL term alone), and a sum of gradients. */
  function anchoredCase() {
    const v = ctx.reference.variants.art as Variant;
    const base = sequences(ctx.inputs, v, true);
    const anchor = base.map((s) => Array.from(s.mask, (m, t) => (t > 0 && !m ? 1 : 0)));
    const sum = new Map<string, Float32Array>();
    return {
      base,
      anchored: base.map((s, i) => ({ ...s, anchor: anchor[i] })),
      klOnly: base.map((s, i) => ({ ...s, mask: anchor[i], advantage: 0 })),
      opts: options(v, 4096),
      sum,
      add: (g: Map<string, Float32Array>) =>
        g.forEach((x, k) => sum.set(k, sum.has(k) ? sum.get(k)!.map((y, i) => y + x[i]) : x)),
    };
  }

  it("anchored context positions add the KL term alone (advantage 0), and nothing when beta is 0", async () => {
    const { base, anchored, klOnly, opts, sum, add } = anchoredCase();
    const pg = await accumulateGradients(ctx.model, base, opts);
    add(await gradsByName(ctx.model));
    const kl = await accumulateGradients(ctx.model, klOnly, opts);
    add(await gradsByName(ctx.model));
    const both = await accumulateGradients(ctx.model, anchored, opts);
    expect(kl.kl).toBeGreaterThan(0);
    expect(worstRelErr(await gradsByName(ctx.model), sum).err).toBeLessThan(1e-4);
    expect(Math.abs(both.kl - pg.kl - kl.kl)).toBeLessThan(1e-5 * (pg.kl + kl.kl));
    expect(Math.abs(both.policyLoss - pg.policyLoss)).toBeLessThan(1e-6 + 1e-5 * Math.abs(pg.policyLoss));
    expect(both.trainedTokens).toBe(pg.trainedTokens);
    expect(both.clipFraction).toBeCloseTo(pg.clipFraction, 6);
    // beta 0: the anchors weigh nothing.
    await accumulateGradients(ctx.model, base, { ...opts, beta: 0 });
    const g0 = await gradsByName(ctx.model);
    await accumulateGradients(ctx.model, anchored, { ...opts, beta: 0 });
    expect(worstRelErr(await gradsByName(ctx.model), g0).err).toBe(0);
  });

  it("anchorBeta holds the anchored positions alone: no KL term on the sampled tokens", async () => {
    const { base, anchored, klOnly, opts, sum, add } = anchoredCase();
    expect(opts.beta).toBeGreaterThan(0);
    const pg0 = await accumulateGradients(ctx.model, base, { ...opts, beta: 0 }); // the policy term alone
    add(await gradsByName(ctx.model));
    await accumulateGradients(ctx.model, klOnly, opts); // the anchored positions' KL term alone
    add(await gradsByName(ctx.model));
    const held = await accumulateGradients(ctx.model, anchored, { ...opts, beta: 0, anchorBeta: opts.beta });
    const g = await gradsByName(ctx.model);
    expect(worstRelErr(g, sum).err).toBeLessThan(1e-4);
    expect(held.policyLoss).toBeCloseTo(pg0.policyLoss, 6);
    // Not the gradient with the KL term on the sampled tokens too.
    await accumulateGradients(ctx.model, anchored, opts);
    expect(worstRelErr(await gradsByName(ctx.model), g).err).toBeGreaterThan(1e-3);
  });

  it("forced tokens are trained by the policy loss with no KL term: forced everywhere is beta 0", async () => {
    const { base, opts } = anchoredCase();
    expect(opts.beta).toBeGreaterThan(0);
    const pg0 = await accumulateGradients(ctx.model, base, { ...opts, beta: 0 });
    const g0 = await gradsByName(ctx.model);
    const forced = base.map((s) => ({ ...s, forced: s.mask }));
    const r = await accumulateGradients(ctx.model, forced, opts);
    expect(worstRelErr(await gradsByName(ctx.model), g0).err).toBeLessThan(1e-6);
    expect(r.kl).toBe(0);
    expect(r.policyLoss).toBeCloseTo(pg0.policyLoss, 6);
    expect(r.trainedTokens).toBe(pg0.trainedTokens);
    // Forcing the first sequence only: its KL term goes, the others' stays (the sum of the two runs' gradients).
    const sum = new Map<string, Float32Array>();
    const add = (g: Map<string, Float32Array>) =>
      g.forEach((x, k) => sum.set(k, sum.has(k) ? sum.get(k)!.map((y, i) => y + x[i]) : x));
    await accumulateGradients(ctx.model, [{ ...base[0], forced: base[0].mask }], opts);
    add(await gradsByName(ctx.model));
    await accumulateGradients(ctx.model, base.slice(1), opts);
    add(await gradsByName(ctx.model));
    const mixed = await accumulateGradients(ctx.model, [forced[0], ...base.slice(1)], opts);
    expect(mixed.kl).toBeGreaterThan(0);
    expect(worstRelErr(await gradsByName(ctx.model), sum).err).toBeLessThan(1e-4);
  });

  it.each(["art", "gspo"])("%s: activation recompute gives the gradients of keeping every activation", async (name) => {
    const v = ctx.reference.variants[name] as Variant;
    const kept = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), options(v, 32));
    const g1 = await gradsByName(ctx.model);
    const live = gpu.pool.stats.liveBytes;
    const re = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), {
      ...options(v, 32),
      recompute: true,
    });
    expect(re.microBatches).toBeGreaterThan(2);
    const g2 = await gradsByName(ctx.model);
    expect(worstRelErr(g2, g1).err).toBeLessThan(1e-6);
    expect(Math.abs(re.loss - kept.loss)).toBeLessThanOrEqual(1e-6 * Math.abs(kept.loss));
    // Released as it went: the step leaves only its totals (read above) behind, as without recompute.
    expect(gpu.pool.stats.liveBytes - live).toBeLessThanOrEqual(live);
  });

  it.each(["art", "token", "gspo"])(
    "%s: micro-batches of a few sequences give the single-batch gradient",
    async (name) => {
      const v = ctx.reference.variants[name] as Variant;
      const whole = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), options(v, 4096));
      const g1 = await gradsByName(ctx.model);
      const split = await accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), options(v, 32));
      expect(split.microBatches).toBeGreaterThan(2);
      const g2 = await gradsByName(ctx.model);
      expect(worstRelErr(g2, g1).err).toBeLessThan(1e-4);
      expect(Math.abs(split.loss - whole.loss)).toBeLessThan(1e-5);
    },
  );
});

describe.each(["grpo-qwen3", "grpo-gemma3"])(
  "%s on a device treated as a GPU (DeviceOptions.asGpu): a GPU's layouts and defaults, untuned, against PyTorch",
  (fixture) => {
    // What CPU devices never run unless a test forces it: a GPU's matmul and attention kernels, the GPU layouts of
    // the norms, RoPE, LoRA and the q/k norms' backward, and the forward submitted part-way, in one GRPO step.
    it("art: loss and LoRA gradients", async () => {
      const ctx = await setup(fixture, await getDevice({ asGpu: true }));
      const g = ctx.model.gpu;
      expect(isCpuDevice(g)).toBe(false);
      expect(ctx.model.submitLayers).toBeGreaterThan(0);
      const v = ctx.reference.variants.art as Variant;
      const { result: r, names } = await kernelsDispatched(() =>
        accumulateGradients(ctx.model, sequences(ctx.inputs, v, true), options(v, 4096)),
      );
      expect(names).toContain("qk_norm_backward_packed");
      // A GPU's kernels where a CPU device runs others: the tiled matmul and attention, RoPE a workgroup a head row.
      for (const k of ["matmul_forward_tiled", "attention_backward_dq", "rope_qkv_wide"]) expect(names).toContain(k);
      const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-3);
      expect(rel(r.loss, v.loss)).toBeLessThan(1e-3);
      expect(rel(r.kl, v.kl)).toBeLessThan(1e-3);
      const worst = worstRelErr(await gradsByName(ctx.model), await readAll(join(FIX, fixture, v.grads)));
      expect(worst.err, `worst gradient ${worst.name}`).toBeLessThan(1e-3);
      expect(g.errors).toEqual([]);
      ctx.model.lora!.dispose();
      freeWeights(g, ctx.model.weights);
    });
  },
);

describe("grpo-qwen3-allowed against PyTorch autograd: allowed sets (a constrained sampler's masks)", () => {
  let ctx: Awaited<ReturnType<typeof setup>>;
  beforeAll(async () => void (ctx = await setup("grpo-qwen3-allowed")));

  it.each(["art", "gspo", "cispo"])(
    "%s: the softmax over each set, ratio 1 there, and the KL over the set",
    async (name) => {
      const v = ctx.reference.variants[name] as Variant;
      const V = ctx.model.config.vocabSize;
      const seqs = sequences(ctx.inputs, v, false, V); // the reference pass computes the KL's logprobs over the sets
      expect(seqs.some((s) => s.allowed?.some((m) => m))).toBe(true);
      const r = await accumulateGradients(ctx.model, seqs, options(v, 4096), { newLogprobs: true });
      const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-3);
      expect(rel(r.loss, v.loss)).toBeLessThan(1e-3);
      expect(rel(r.policyLoss, v.policy_loss)).toBeLessThan(1e-3);
      expect(rel(r.kl, v.kl)).toBeLessThan(1e-3);
      const worst = worstRelErr(await gradsByName(ctx.model), await readAll(join(FIX, "grpo-qwen3-allowed", v.grads)));
      expect(worst.err, `worst gradient ${worst.name}`).toBeLessThan(1e-3);
      const trainable = (ctx.reference.trainable as boolean[][]).flat();
      const want = (ctx.reference.new_logprobs as number[][][]).flat().filter((_, i) => trainable[i]);
      seqs.forEach((s, i) => {
        for (let t = 1; t < s.ids.length; t++) {
          expect(Math.abs(r.newLogprobs![i][t] - want[i][t])).toBeLessThan(2e-4);
          // Over a set, the token is likelier than over the whole vocabulary the sampler reported.
          if (s.allowed![t] && s.mask[t]) expect(r.newLogprobs![i][t]).toBeGreaterThan(s.oldLogprobs[t]);
        }
      });
    },
  );

  it("without its sets the same step has other gradients (the sets are not a no-op)", async () => {
    const v = ctx.reference.variants.art as Variant;
    const seqs = sequences(ctx.inputs, v, false).map((s) => ({ ...s, allowed: undefined }));
    await accumulateGradients(ctx.model, seqs, options(v, 4096));
    const worst = worstRelErr(await gradsByName(ctx.model), await readAll(join(FIX, "grpo-qwen3-allowed", v.grads)));
    expect(worst.err).toBeGreaterThan(0.05);
  });
});

it("packs micro-batches longest first, each within the budget once padded to its longest", () => {
  const lengths = [30, 100, 40, 90, 35, 100];
  const batches = microBatches(lengths, 200);
  // In order, [30, 100] would pad 30 up to 100; sorted, the two 100s share a batch, then 90 with 40, 35 with 30.
  expect(batches).toEqual([
    [1, 5],
    [3, 2],
    [4, 0],
  ]);
  for (const b of batches) expect(b.length * Math.max(...b.map((i) => lengths[i]))).toBeLessThanOrEqual(200);
  // A sequence over the budget still gets a batch of its own.
  expect(microBatches([300, 10], 200)).toEqual([[0], [1]]);
});
