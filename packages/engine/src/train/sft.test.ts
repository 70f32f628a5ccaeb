// Full-parameter SFT: every base weight's gradient checked against finite differences of the GPU loss
// (on the largest-gradient entries of several tensors), and the loss falls over steps.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { isIgnorableTensor, parseConfig, tensorShapes } from "../config/index.ts";
import { Model } from "../model/model.ts";
import { uploadWeights } from "../model/weights.ts";
import { modelFiles, readJson, WeightReader } from "../weights/index.ts";
import { FullTrainer, type SftSequence } from "./sft.ts";

const FIX = join(import.meta.dirname, "../../fixtures");
let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

async function load(name: string): Promise<Model> {
  const files = await modelFiles(join(FIX, name));
  const config = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const w = await uploadWeights(
    gpu,
    config,
    reader.tensors(tensorShapes(config), { ignore: (n) => isIgnorableTensor(config, n) }),
    { toF32: true },
  );
  return new Model(gpu, config, w);
}

function batch(V: number, seed: number): SftSequence[] {
  const rng = new Rng(seed);
  return [9, 6, 12].map((T) => ({
    ids: Array.from({ length: T }, () => rng.int(V)),
    mask: Array.from({ length: T }, (_, t) => (t >= 3 ? 1 : 0)),
  }));
}

const noop = { lr: 0, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 0, microBatchTokens: 24 };

describe.each(["llama-tiny", "qwen2-tiny", "qwen3-tiny"])("%s full fine-tuning", (name) => {
  it("gradients match finite differences of the loss", async () => {
    const model = await load(name);
    const tr = new FullTrainer(model);
    const seqs = batch(model.config.vocabSize, 1);
    const base = await tr.step_(seqs, noop);
    const grads = await gpu.readF32(tr.grads.buffer, tr.grads.size);
    const names = [
      "model.embed_tokens.weight",
      "model.layers.0.self_attn.q_proj.weight",
      "model.layers.1.mlp.down_proj.weight",
      "model.layers.0.input_layernorm.weight",
      "model.norm.weight",
    ];
    if (model.config.qkvBias) names.push("model.layers.0.self_attn.v_proj.bias");
    if (model.config.qkNorm) names.push("model.layers.1.self_attn.k_norm.weight");
    if (!model.config.tieWordEmbeddings) names.push("lm_head.weight");
    for (const n of names) {
      const t = tr.tensors.find((x) => x.name === n)!;
      // The entry with the largest gradient, so the finite difference is well above f32 noise.
      let best = 0;
      for (let i = 1; i < t.n; i++) if (Math.abs(grads[t.offset + i]) > Math.abs(grads[t.offset + best])) best = i;
      const buf = "buffer" in t.weight ? t.weight.buffer : t.weight;
      const at = ("buffer" in t.weight ? t.weight.offset : 0) + best * 4;
      const orig = new Float32Array(await gpu.read(buf, 4, at));
      const eps = 1e-2;
      const lossAt = async (v: number) => {
        gpu.write(buf, new Float32Array([v]), at);
        return (await tr.step_(seqs, noop)).loss;
      };
      const fd = ((await lossAt(orig[0] + eps)) - (await lossAt(orig[0] - eps))) / (2 * eps);
      gpu.write(buf, orig, at);
      const g = grads[t.offset + best];
      expect(Math.abs(fd - g), `${n}[${best}]: finite difference ${fd} vs gradient ${g}`).toBeLessThan(
        0.03 * Math.abs(g) + 2e-4,
      );
    }
    expect(base.loss).toBeGreaterThan(0);
  });

  it("the loss falls over a few AdamW steps", async () => {
    const model = await load(name);
    const tr = new FullTrainer(model);
    const seqs = batch(model.config.vocabSize, 2);
    const losses: number[] = [];
    for (let i = 0; i < 6; i++) losses.push((await tr.step_(seqs, { ...noop, lr: 1e-2, maxGradNorm: 1 })).loss);
    expect(losses[5]).toBeLessThan(losses[0] * 0.7);
  });

  it("resetOptimizer: the next step is a first AdamW step again (every moved weight moves by lr)", async () => {
    const model = await load(name);
    const tr = new FullTrainer(model);
    for (let i = 0; i < 3; i++) await tr.step_(batch(model.config.vocabSize, 10 + i), { ...noop, lr: 1e-2 });
    const lr = 1e-3;
    const moved = async () => {
      const before = await tr.readWeights();
      await tr.step_(batch(model.config.vocabSize, 20), { ...noop, lr });
      const after = await tr.readWeights();
      const d = after
        .flatMap((w, i) => Array.from(w, (x, j) => Math.abs(x - before[i][j])))
        .filter((x) => x > lr * 1e-3);
      return { n: d.length, nearLr: d.filter((x) => Math.abs(x - lr) < lr * 0.02).length };
    };
    const carried = await moved(); // m and v carry three steps of other batches: updates are not all lr
    expect(carried.nearLr).toBeLessThan(carried.n * 0.5);
    await tr.resetOptimizer();
    // A first bias-corrected step is lr * g / (|g| + eps): lr for every weight whose gradient is not tiny.
    const fresh = await moved();
    expect(fresh.n).toBeGreaterThan(100);
    expect(fresh.nearLr).toBeGreaterThan(fresh.n * 0.95);
  });

  it("activation recompute gives the same full gradients", async () => {
    const model = await load(name);
    const tr = new FullTrainer(model);
    const seqs = batch(model.config.vocabSize, 2);
    const a = await tr.step_(seqs, noop);
    const g1 = await gpu.readF32(tr.grads.buffer, tr.grads.size);
    const b = await tr.step_(seqs, { ...noop, recompute: true });
    const g2 = await gpu.readF32(tr.grads.buffer, tr.grads.size);
    let m = 0;
    let d = 0;
    for (let i = 0; i < g1.length; i++) {
      m = Math.max(m, Math.abs(g1[i]));
      d = Math.max(d, Math.abs(g2[i] - g1[i]));
    }
    expect(m).toBeGreaterThan(0);
    expect(d / m).toBeLessThan(1e-6);
    expect(b.loss).toBe(a.loss);
  });

  it("follows PyTorch (float64) over several AdamW steps: losses, grad norms and each tensor's update", async () => {
    const fx = (JSON.parse(readFileSync(join(FIX, "sft.json"), "utf8")) as Record<string, SftFixture>)[name];
    const model = await load(name);
    const tr = new FullTrainer(model);
    const before = await tr.readWeights();
    const o = {
      lr: fx.hp.lr,
      beta1: fx.hp.beta1,
      beta2: fx.hp.beta2,
      eps: fx.hp.eps,
      weightDecay: fx.hp.weight_decay,
      maxGradNorm: fx.hp.max_norm,
      microBatchTokens: 24,
    };
    for (let i = 0; i < fx.hp.steps; i++) {
      const r = await tr.step_(fx.sequences, o);
      expect(r.loss, `step ${i + 1} loss`).toBeCloseTo(fx.losses[i], 4);
      expect(
        Math.abs(r.gradNorm - fx.grad_norms[i]),
        `step ${i + 1} grad norm ${r.gradNorm} vs ${fx.grad_norms[i]}`,
      ).toBeLessThan(1e-3 * fx.grad_norms[i]);
    }
    const lrZero = await tr.step_(fx.sequences, { ...o, lr: 0, weightDecay: 0 });
    expect(lrZero.loss, "loss after the last step").toBeCloseTo(fx.final_loss, 4);
    const after = await tr.readWeights();
    tr.tensors.forEach((t, k) => {
      let d = 0;
      for (let i = 0; i < t.n; i++) d += (after[k][i] - before[k][i]) ** 2;
      const want = fx.update_norms[t.name];
      expect(Math.abs(Math.sqrt(d) - want), `${t.name}: update norm ${Math.sqrt(d)} vs PyTorch ${want}`).toBeLessThan(
        0.01 * want + 1e-6,
      );
    });
  });
});

interface SftFixture {
  hp: { lr: number; beta1: number; beta2: number; eps: number; weight_decay: number; max_norm: number; steps: number };
  sequences: SftSequence[];
  losses: number[];
  grad_norms: number[];
  final_loss: number;
  update_norms: Record<string, number>;
}
