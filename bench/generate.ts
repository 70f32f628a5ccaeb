// `npm run bench -- generate`: prefill and decode tokens/s at batch 1, 8 and 32 for generated models of
// ~1M and ~20M parameters, and a Qwen2.5-0.5B-shaped model with random bf16 weights (load, a few decode
// steps at batch 1 and 8, the engine's memory accounting against weights + KV cache). Also the compute
// dispatches of a decode step (batch 1 and 8, with and without a LoRA adapter) and of a GRPO step per trained
// token, for the embedded model's shape, Qwen2.5-0.5B's and Qwen3-0.6B's (per-head q/k norms): counts, which do not
// depend on load.
import { readFileSync } from "node:fs";
import type { Gpu } from "@webart/gpu";
import {
  accumulateGradients,
  DEFAULT_LORA,
  Engine,
  freeSample,
  KvCache,
  LoraState,
  Model,
  ModelRunner,
  optimizerStep,
  parseConfig,
  planMemory,
  tensorShapes,
  uploadWeights,
  type ModelConfig,
  type Tensor,
  type TrainSequence,
} from "@webart/engine";
import { Rng, toBf16 } from "@webart/gpu";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";
import { configJson, narrowConfig, TINY as TINY_DIR } from "./models.ts";

const llama = (C: number, L: number, H: number, KV: number, F: number, V: number) =>
  parseConfig({
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    hidden_act: "silu",
    hidden_size: C,
    num_hidden_layers: L,
    num_attention_heads: H,
    num_key_value_heads: KV,
    intermediate_size: F,
    vocab_size: V,
    max_position_embeddings: 2048,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
    torch_dtype: "float32",
  });

const QWEN25_05B = parseConfig(configJson("qwen2.5-0.5b"));

/** Random weights streamed straight to the loader (no file): f32, or bf16 bytes. */
export async function* randomTensors(c: ModelConfig, bf16: boolean, seed = 1): AsyncGenerator<Tensor> {
  const rng = new Rng(seed);
  for (const [name, shape] of tensorShapes(c)) {
    const n = shape.reduce((a, b) => a * b, 1);
    if (shape.length === 1) {
      yield {
        name,
        dtype: "F32",
        shape,
        bytes: new Uint8Array(new Float32Array(n).fill(name.endsWith("bias") ? 0 : 1).buffer),
      };
      continue;
    }
    // A cheap uniform fill (scaled like N(0, 0.02)): normals for 500M weights would dominate the bench.
    const s = 0.035;
    if (bf16) {
      const u = new Uint16Array(n);
      for (let i = 0; i < n; i++) u[i] = toBf16((rng.next() * 2 - 1) * s);
      yield { name, dtype: "BF16", shape, bytes: new Uint8Array(u.buffer) };
    } else {
      const f = new Float32Array(n);
      for (let i = 0; i < n; i++) f[i] = (rng.next() * 2 - 1) * s;
      yield { name, dtype: "F32", shape, bytes: new Uint8Array(f.buffer) };
    }
  }
}

/** The embedded model's config (models/webart-tiny): its shape, with random weights. */
const TINY = parseConfig(readFileSync(new URL("../models/webart-tiny/config.json", import.meta.url), "utf8"));

/** Sampling at temperature 1 from `row` of the step's logits, for stream b (seeded by b) at decode step `step`;
 *  `top` logprobs read back. */
export function sampleSpec(row: number, b: number, step: number, top = 0) {
  return { ...freeSample(row, b, step), top };
}

/**
 * Compute dispatches of one decode step (after a prefill of 8 tokens a sequence) at batch 1 and 8, without and
 * with a LoRA adapter on every target (rank 8), and of one GRPO step (gradient and optimizer) on 2 sequences of
 * 16 tokens with 8 trained each, per trained token. The model's adapter is removed again at the end.
 */
async function dispatchCounts(gpu: Gpu, model: Model, id: string): Promise<BenchResult[]> {
  const out: BenchResult[] = [];
  const V = model.config.vocabSize;
  const P = 8;
  const decodeStep = async (B: number) => {
    const runner = new ModelRunner(model, B, P + 2);
    const n = B * P;
    await runner.step(
      {
        ids: new Uint32Array(n).map((_, i) => (7 * i) % V),
        slots: new Uint32Array(n).map((_, i) => Math.floor(i / P)),
        pos: new Uint32Array(n).map((_, i) => i % P),
      },
      Array.from({ length: B }, (_, b) => sampleSpec(b * P + P - 1, b, 0)),
    );
    await runner.step(
      {
        ids: new Uint32Array(B).map((_, b) => b % V),
        slots: Uint32Array.from({ length: B }, (_, b) => b),
        pos: new Uint32Array(B).fill(P),
      },
      Array.from({ length: B }, (_, b) => sampleSpec(b, b, 0)),
    );
    runner.dispose();
    return runner.lastDispatches;
  };
  const lora = new LoraState(gpu, model.config, DEFAULT_LORA);
  lora.initialize(1);
  try {
    for (const withLora of [false, true]) {
      model.lora = withLora ? lora : undefined;
      for (const B of [1, 8]) {
        const name = `dispatches.${id}.decode.b${B}${withLora ? ".lora" : ""}`;
        const lora = withLora ? ", LoRA rank 8 on q,k,v,o,gate,up,down" : "";
        model.fuse(false);
        const perOp = await decodeStep(B);
        model.fuse(true);
        out.push({
          id: `${name}.per_op`,
          value: perOp,
          unit: "dispatches",
          note: `one decode step, one dispatch per op${lora}`,
        });
        model.fuseRope = false;
        const ropeApart = await decodeStep(B);
        model.fuseRope = true;
        const fused = await decodeStep(B);
        // With the adapter merged into the weights (Model.mergeLora; the merge itself runs in the prefill step).
        model.mergeLora = withLora;
        const merged = withLora ? `, ${await decodeStep(B)} with the adapter merged into the weights (mergeLora)` : "";
        model.mergeLora = false;
        model.releaseMerged();
        out.push({
          id: name,
          value: fused,
          unit: "dispatches",
          note: `one decode step${lora}; ${(perOp / fused).toFixed(2)}x fewer than one dispatch per op, ${ropeApart} with RoPE in its own dispatch${merged}`,
        });
      }
    }
    model.lora = lora;
    const T = 16;
    const seqs: TrainSequence[] = [0, 1].map((s) => ({
      ids: Array.from({ length: T }, (_, t) => (13 * t + s) % V),
      mask: Array.from({ length: T }, (_, t) => (t >= T / 2 ? 1 : 0)),
      oldLogprobs: new Array<number>(T).fill(NaN),
      advantage: s ? 1 : -1,
      coef: 1 / T,
    }));
    const grads = async (gateUp: boolean, qkv: boolean) => {
      [model.fuseGateUp, model.fuseQkv] = [gateUp, qkv];
      try {
        const r = await accumulateGradients(model, seqs, {
          loss: "ppo",
          level: "token",
          epsilon: 0.2,
          epsilonHigh: 0.2,
          beta: 0,
          microBatchTokens: 4096,
        });
        gpu.release(r.totals, r.entropyAll);
        return r;
      } finally {
        [model.fuseGateUp, model.fuseQkv] = [true, true];
      }
    };
    const apart = await grads(false, false);
    const qkvApart = await grads(true, false);
    const g = await grads(true, true);
    const opt = await optimizerStep(
      model,
      { lr: 0, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 },
      1,
    );
    const perToken = (d: number) => (d + opt.dispatches) / g.trainedTokens;
    out.push({
      id: `dispatches.${id}.grpo.per_trained_token.unfused`,
      value: perToken(apart.dispatches),
      unit: "dispatches",
      note: `${apart.dispatches} + ${opt.dispatches} (optimizer) for ${g.trainedTokens} trained tokens, q, k, v and gate, up as matmuls of their own`,
    });
    out.push({
      id: `dispatches.${id}.grpo.per_trained_token`,
      value: perToken(g.dispatches),
      unit: "dispatches",
      note: `${g.dispatches} + ${opt.dispatches} (optimizer) for ${g.trainedTokens} trained tokens: 2 sequences x ${T}, one micro-batch; ${perToken(qkvApart.dispatches).toFixed(2)} with q, k and v apart (gate|up fused)`,
    });
  } finally {
    model.lora = undefined;
    lora.dispose();
    gpu.pool.trim();
  }
  return out;
}

async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await f();
  return (performance.now() - t0) / 1000;
}

/** Decode steps in a run (the engine's default SchedulerOptions.decodeAhead). */
export const AHEAD = 8;

/**
 * Prefill B prompts of P tokens (one step), then D decode steps for all B sequences; then (abD > 0) abD more of the
 * model's decode steps alternating with abD of one dispatch per op (`toggle(false)`, default Model.fuse(false)), each
 * timed alone, so the two compare under the same load; then (runs > 0) `runs` runs of AHEAD steps with no readback between them
 * (ModelRunner.decode, the engine's free-text path) alternating with as many rounds of AHEAD steps one at a time.
 */
export async function decodeRun(
  gpu: Gpu,
  model: Model,
  B: number,
  P: number,
  D: number,
  abD = 0,
  runs = 0,
  toggle: (on: boolean) => void = (on) => model.fuse(on),
  replay = true,
  replayAb = 0,
  partsAb = 0,
): Promise<{
  prefill: number;
  decode: number;
  dispatches: number;
  /** Per decode step: its wall time (mean) and the host time until its submit (median), in ms. */
  stepMs: number;
  encodeMs: number;
  ab?: { fused: number; perOp: number };
  /** tok/s in runs of AHEAD steps and one step at a time. */
  ahead?: { run: number; single: number };
  /** tok/s one step at a time, replayed (ModelRunner.replay) and recorded by the model's code: `replayAb` blocks of
   *  4 steps each, alternating, each after an untimed step (a replay block's captures there). */
  replays?: { on: number; off: number };
  /** tok/s one step at a time, replayed, submitting part-way where their tape says (Model.submitLayers) and once
   *  (ModelRunner.holdParts): `partsAb` blocks of 4 steps each, alternating, after one untimed step. */
  parts?: { on: number; held: number };
}> {
  const runner = new ModelRunner(
    model,
    B,
    P + D + 2 * abD + 10 * replayAb + 8 * partsAb + 1 + (2 * runs + 1) * AHEAD + 4,
  );
  runner.replay = replay;
  const rng = new Rng(B);
  const V = model.config.vocabSize;
  const ids = new Uint32Array(B * P).map(() => rng.int(V));
  const slots = new Uint32Array(B * P).map((_, i) => Math.floor(i / P));
  const pos = new Uint32Array(B * P).map((_, i) => i % P);
  // Warm-up (pipelines compile once).
  await runner.step({ ids: ids.subarray(0, 2), slots: new Uint32Array(2), pos: new Uint32Array([0, 1]) }, [
    sampleSpec(1, 0, 0),
  ]);
  const prefill = await timed(async () => {
    await runner.step(
      { ids, slots, pos },
      Array.from({ length: B }, (_, b) => sampleSpec(b * P + P - 1, b, 0)),
    );
  });
  let last: Uint32Array = new Uint32Array(B).map(() => rng.int(V));
  let at = P;
  const step = async () => {
    const r = await runner.step(
      { ids: last, slots: Uint32Array.from({ length: B }, (_, b) => b), pos: new Uint32Array(B).fill(at) },
      Array.from({ length: B }, (_, b) => sampleSpec(b, b, at - P + 1)),
    );
    last = r.ids;
    at++;
  };
  // Two untimed decode steps first: the decode kernels' pipelines compile in the first.
  if (D) for (let d = 0; d < 2; d++) await step();
  const encodeMs: number[] = [];
  const decode = await timed(async () => {
    for (let d = 0; d < D; d++) {
      await step();
      encodeMs.push(runner.lastEncodeMs);
    }
  });
  let ab: { fused: number; perOp: number } | undefined;
  if (abD) {
    // Both sides recorded by the model's code: a replay would not follow what the toggle changes in place, nor submit
    // part-way (Model.submitLayers).
    runner.replay = false;
    runner.idle();
    const t = { fused: 0, perOp: 0 };
    toggle(false);
    await step(); // the per-op pipelines compile
    for (let d = 0; d < 2 * abD; d++) {
      toggle(d % 2 === 1);
      t[d % 2 === 1 ? "fused" : "perOp"] += await timed(step);
    }
    toggle(true);
    runner.replay = replay;
    ab = { fused: (B * abD) / t.fused, perOp: (B * abD) / t.perOp };
  }
  let replays: { on: number; off: number } | undefined;
  if (replayAb) {
    const t = { on: 0, off: 0 };
    for (let r = 0; r < 2 * replayAb; r++) {
      const on = r % 2 === 1;
      runner.replay = on;
      await step();
      t[on ? "on" : "off"] += await timed(async () => {
        for (let d = 0; d < 4; d++) await step();
      });
    }
    runner.replay = replay;
    replays = { on: (B * 4 * replayAb) / t.on, off: (B * 4 * replayAb) / t.off };
  }
  let parts: { on: number; held: number } | undefined;
  if (partsAb) {
    const t = { on: 0, held: 0 };
    runner.replay = true;
    await step(); // captured here (or replayed), then replayed throughout: holdParts is not part of the tape's key
    for (let r = 0; r < 2 * partsAb; r++) {
      const on = r % 2 === 1;
      runner.holdParts = !on;
      t[on ? "on" : "held"] += await timed(async () => {
        for (let d = 0; d < 4; d++) await step();
      });
    }
    runner.holdParts = false;
    runner.replay = replay;
    parts = { on: (B * 4 * partsAb) / t.on, held: (B * 4 * partsAb) / t.held };
  }
  let ahead: { run: number; single: number } | undefined;
  if (runs) {
    const run = async () => {
      const slots = Uint32Array.from({ length: B }, (_, b) => b);
      const specs = Array.from({ length: B }, (_, b) => sampleSpec(b, b, at - P + 1));
      const res = await runner.decode({ ids: last, slots, pos: new Uint32Array(B).fill(at) }, specs, AHEAD);
      last = res[AHEAD - 1].ids;
      at += AHEAD;
    };
    await run(); // warm-up
    const t = { run: 0, single: 0 };
    for (let r = 0; r < 2 * runs; r++) {
      if (r % 2) t.run += await timed(run);
      else
        t.single += await timed(async () => {
          for (let d = 0; d < AHEAD; d++) await step();
        });
    }
    ahead = { run: (B * AHEAD * runs) / t.run, single: (B * AHEAD * runs) / t.single };
  }
  const dispatches = runner.lastDispatches;
  runner.dispose();
  gpu.pool.trim();
  return {
    prefill: (B * P) / prefill,
    decode: (B * D) / decode,
    dispatches,
    stepMs: (1000 * decode) / D,
    encodeMs: encodeMs.sort((a, b) => a - b)[Math.floor(D / 2)] ?? 0,
    ab,
    ahead,
    replays,
    parts,
  };
}

/**
 * The floor of the host's encode time for one decode step at batch B as the model's code records it (no tape): the
 * compute pass calls it made (setPipeline, setBindGroup, dispatchWorkgroups, recorded by wrapping the pass encoder's
 * methods for one step), made again straight into a pass with nothing else around them; the best of 8, in ms.
 */
export async function nativeEncodeMs(gpu: Gpu, model: Model, B: number): Promise<number> {
  const probe = gpu.device.createCommandEncoder().beginComputePass();
  const proto = Object.getPrototypeOf(probe) as Record<string, (...a: unknown[]) => unknown>;
  probe.end();
  const names = ["setPipeline", "setBindGroup", "dispatchWorkgroups"];
  const orig = names.map((m) => proto[m]);
  const calls: [number, unknown[]][] = [];
  let r: Awaited<ReturnType<typeof decodeRun>>;
  try {
    names.forEach((m, i) => {
      proto[m] = function (this: unknown, ...a: unknown[]) {
        calls.push([i, a]);
        return orig[i].apply(this, a);
      };
    });
    r = await decodeRun(gpu, model, B, 8, 1, 0, 0, undefined, false);
  } finally {
    names.forEach((m, i) => (proto[m] = orig[i]));
  }
  // decodeRun's pool trim destroyed the step's buffers: the replay is encoded, never submitted.
  const step = calls.slice(-3 * r.dispatches);
  let best = Infinity;
  for (let rep = 0; rep < 8; rep++) {
    const pass = gpu.device.createCommandEncoder().beginComputePass();
    const t0 = performance.now();
    for (const [i, a] of step) orig[i].apply(pass, a);
    best = Math.min(best, performance.now() - t0);
    pass.end();
  }
  return best;
}

/**
 * The host's encode of one decode step at batch B (after a prompt of 8 tokens), recorded back to back and never run
 * (ModelRunner.encodeOnly): the median of 200 after 50 untimed, in ms. In a decode loop the host waits on the device
 * between steps and the next encode starts on cold caches; this is the encode's own cost, comparable with the
 * Dawn calls of the model's code alone (nativeEncodeMs). `replay`: the step is replayed from the tape of one run
 * before (ModelRunner.replay); off, recorded by the model's code each time.
 */
export async function hotEncodeMs(gpu: Gpu, model: Model, B: number, replay = true): Promise<number> {
  const P = 8;
  const runner = new ModelRunner(model, B, 2 * P);
  runner.replay = replay;
  try {
    const ids = new Uint32Array(B * P).fill(1);
    const slots = new Uint32Array(B * P).map((_, i) => Math.floor(i / P));
    const pos = new Uint32Array(B * P).map((_, i) => i % P);
    await runner.step({ ids, slots, pos }, [sampleSpec(P - 1, 0, 0)]);
    const step = {
      ids: new Uint32Array(B).fill(1),
      slots: slots.filter((_, i) => i % P === 0),
      pos: new Uint32Array(B).fill(P),
    };
    const specs = Array.from({ length: B }, (_, b) => sampleSpec(b, b, 1));
    if (replay) await runner.step(step, specs); // captured here, replayed below
    const ms: number[] = [];
    for (let i = 0; i < 250; i++) {
      const t = runner.encodeOnly(step, specs);
      if (i >= 50) ms.push(t);
      if (i % 50 === 49) await gpu.sync(); // the uploads the dropped steps made
    }
    return ms.sort((a, b) => a - b)[ms.length >> 1];
  } finally {
    runner.dispose();
  }
}

/**
 * Requests of different lengths served together, as an agent's rollouts are: six chat completions at once on the
 * embedded model (prompts and max_tokens of six sizes, so the batch shrinks as they finish), `rounds` times. Returns
 * each round's share of bind-group lookups that had to make a group (a step finds its groups only when the pool
 * hands it the same buffers as before).
 */
async function servingBindGroupMisses(gpu: Gpu, rounds: number): Promise<number[]> {
  const engine = await Engine.load(TINY_DIR, { gpu, name: "mixed", kvSlots: 8, maxContext: 512 });
  const client = engine.openaiClient();
  const out: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const [h0, m0] = [gpu.bindGroupHits, gpu.bindGroupMisses];
      await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          client.chat.completions.create({
            model: "mixed",
            messages: [{ role: "user", content: "hello ".repeat(1 + 3 * i) }],
            max_tokens: 10 + 15 * i,
            temperature: 1,
            seed: i + round,
          }),
        ),
      );
      const [hits, misses] = [gpu.bindGroupHits - h0, gpu.bindGroupMisses - m0];
      out.push(misses / Math.max(1, hits + misses));
    }
  } finally {
    await engine.close();
  }
  return out;
}

/** Runs of AHEAD decode steps against as many steps one at a time, alternating (decodeRun's `ahead`). */
export function aheadResult(id: string, a: { run: number; single: number }): BenchResult {
  return {
    id: `${id}.ahead`,
    value: a.run,
    unit: "tok/s",
    vs: { id: `${id}.single`, ratio: a.run / a.single },
    note: `runs of ${AHEAD} steps with no readback between them; one step at a time ${a.single.toPrecision(4)} tok/s, alternating`,
  };
}

export const generateSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const gpu = ctx.gpu;
  const out: BenchResult[] = [];
  {
    // The embedded model's shape: dispatch counts.
    const w = await uploadWeights(gpu, TINY, randomTensors(TINY, false));
    const model = new Model(gpu, TINY, w);
    out.push(...(await dispatchCounts(gpu, model, "tiny")));
    model.dispose();
    gpu.pool.trim();
  }
  {
    const misses = await servingBindGroupMisses(gpu, 5);
    const pct = misses.map((m) => `${(100 * m).toFixed(1)}%`).join(", ");
    out.push({
      id: "generate.serving.bind_group_misses",
      value: (100 * misses.slice(2).reduce((a, m) => a + m, 0)) / (misses.length - 2),
      unit: "%",
      note: `six chat completions of different lengths at once on the embedded model, 5 rounds; rounds 3-5's mean. Each round: ${pct}`,
    });
  }
  const models: [string, ModelConfig][] = [
    ["1m", llama(128, 4, 4, 2, 384, 512)],
    ["20m", llama(512, 6, 8, 4, 1408, 2048)],
  ];
  for (const [id, c] of models) {
    const w = await uploadWeights(gpu, c, randomTensors(c, false));
    const model = new Model(gpu, c, w);
    // A rollout's decode: with the adapter being trained (rank 8 on every projection, B random so it counts).
    const lora = new LoraState(gpu, c, DEFAULT_LORA);
    lora.write(new Rng(4).f32(lora.size, -0.05, 0.05));
    const params = [...tensorShapes(c).values()].reduce((s, sh) => s + sh.reduce((a, b) => a * b, 1), 0);
    ctx.log(`${id}: ${(params / 1e6).toFixed(2)}M parameters`);
    const P = ctx.quick ? 16 : 64;
    const D = ctx.quick ? 3 : 8;
    let base = 0;
    for (const B of [1, 8, 32]) {
      const r = await decodeRun(gpu, model, B, P, D, D, ctx.quick ? 1 : id === "1m" ? 8 : 3);
      if (B === 1) base = r.decode;
      out.push({ id: `generate.${id}.prefill.b${B}`, value: r.prefill, unit: "tok/s", note: `${P}-token prompts` });
      out.push({
        id: `generate.${id}.decode.b${B}`,
        value: r.decode,
        unit: "tok/s",
        ...(B > 1 ? { vs: { id: `generate.${id}.decode.b1`, ratio: r.decode / base } } : {}),
      });
      const ab = r.ab!;
      out.push({
        id: `generate.${id}.decode.b${B}.per_op`,
        value: ab.perOp,
        unit: "tok/s",
        vs: { id: `generate.${id}.decode.b${B}`, ratio: ab.fused / ab.perOp },
        note: `one dispatch per op; ratio: the model's decode (${ab.fused.toPrecision(4)} tok/s) over this, steps alternating`,
      });
      out.push(aheadResult(`generate.${id}.decode.b${B}`, r.ahead!));
      const withLora = (await decodeRun(gpu, model, B, P, 0, 2 * D, 0, (on) => (model.lora = on ? lora : undefined)))
        .ab!;
      out.push({
        id: `generate.${id}.decode.b${B}.lora`,
        value: withLora.fused,
        unit: "tok/s",
        vs: { id: `generate.${id}.decode.b${B}`, ratio: withLora.fused / withLora.perOp },
        note: `with a LoRA adapter (rank 8 on q, k, v, o, gate, up, down), as rollouts decode; ratio: over the same model without it (${withLora.perOp.toPrecision(4)} tok/s), steps alternating`,
      });
      if (B < 32) {
        // RoPE and the cache write in the q|k|v matvec (Model.fuseRope) against ropeQkv after it, steps alternating.
        const rope = (await decodeRun(gpu, model, B, P, 0, 2 * D, 0, (on) => (model.fuseRope = on))).ab!;
        out.push({
          id: `generate.${id}.decode.b${B}.rope_apart`,
          value: rope.perOp,
          unit: "tok/s",
          vs: { id: `generate.${id}.decode.b${B}`, ratio: rope.fused / rope.perOp },
          note: `RoPE in its own dispatch (ropeQkv); ratio: RoPE in the q|k|v matvec (${rope.fused.toPrecision(4)} tok/s) over this, steps alternating`,
        });
      }
    }
    model.lora = undefined;
    lora.dispose();
    model.dispose();
    gpu.pool.trim();
  }
  {
    // The host's share of a decode step: Qwen2.5-0.5B's 24 layers and structure (q/k/v bias, tied head) at narrow
    // widths, so the device's work is small and the step's dispatches are as many as the real model's.
    const c = parseConfig(narrowConfig("qwen2.5-0.5b", 1024));
    const w = await uploadWeights(gpu, c, randomTensors(c, false));
    const model = new Model(gpu, c, w);
    // Its dispatches: a decode step's, and a trained token's with q|k|v and gate|up fused and not (24 layers, biases).
    out.push(...(await dispatchCounts(gpu, model, "qwen05b_layers")));
    for (const B of [1, 8]) {
      const D = ctx.quick ? 20 : 100;
      const r = await decodeRun(gpu, model, B, 8, D);
      const r0 = await decodeRun(gpu, model, B, 8, D, 0, 0, undefined, false);
      const native = await nativeEncodeMs(gpu, model, B);
      const hot = await hotEncodeMs(gpu, model, B);
      const hot0 = await hotEncodeMs(gpu, model, B, false);
      out.push(
        {
          id: `generate.encode.qwen05b_layers.b${B}`,
          value: r.encodeMs,
          unit: "ms",
          vs: { id: `generate.encode.qwen05b_layers.b${B}.recorded`, ratio: r.encodeMs / r0.encodeMs },
          note: `host time to encode a decode step of ${r.dispatches} dispatches, replayed from its tape (median; ${((1000 * r.encodeMs) / r.dispatches).toFixed(1)} us a dispatch); the step took ${r.stepMs.toFixed(2)} ms. Ratio: over the same step recorded by the model's code (ModelRunner.replay off)`,
        },
        {
          id: `generate.encode.qwen05b_layers.b${B}.recorded`,
          value: r0.encodeMs,
          unit: "ms",
          vs: { id: `generate.encode.qwen05b_layers.b${B}.native`, ratio: r0.encodeMs / native },
          note: `the same, each step recorded by the model's code (no tape); the step took ${r0.stepMs.toFixed(2)} ms. Ratio: over its Dawn calls alone, made again (${native.toFixed(3)} ms)`,
        },
        {
          id: `generate.encode.qwen05b_layers.b${B}.back_to_back`,
          value: hot,
          unit: "ms",
          vs: { id: `generate.encode.qwen05b_layers.b${B}.native`, ratio: hot / native },
          note: `the same step's encode, replayed, 200 times back to back and never run (median): the engine's own cost without the cold start of a host that waited on the device; recorded by the model's code: ${hot0.toFixed(3)} ms. Ratio: over the model's code's Dawn calls alone, made again (${native.toFixed(3)} ms)`,
        },
      );
    }
    model.dispose();
    gpu.pool.trim();
  }
  {
    // Qwen3-0.6B's 28 layers and structure (per-head q/k norms, no biases) at narrow widths: its dispatches.
    const c = parseConfig(narrowConfig("qwen3-0.6b", 1024));
    const model = new Model(gpu, c, await uploadWeights(gpu, c, randomTensors(c, false)));
    out.push(...(await dispatchCounts(gpu, model, "qwen3_layers")));
    model.dispose();
    gpu.pool.trim();
  }
  {
    // Gemma 3 1B's 26 layers and structure (q/k norms, a norm on each branch before its residual add) at narrow widths.
    const c = parseConfig(narrowConfig("gemma-3-1b", 1024));
    const model = new Model(gpu, c, await uploadWeights(gpu, c, randomTensors(c, false)));
    out.push(...(await dispatchCounts(gpu, model, "gemma3_layers")));
    model.dispose();
    gpu.pool.trim();
  }
  if (!ctx.quick) {
    // Qwen2.5-0.5B shape, random bf16 weights: load, decode, and the memory the engine accounts for.
    const c = QWEN25_05B;
    const before = gpu.memory.liveBytes;
    const t0 = performance.now();
    const w = await uploadWeights(gpu, c, randomTensors(c, true));
    const loadS = (performance.now() - t0) / 1000;
    const model = new Model(gpu, c, w);
    const slots = 8;
    const ctxLen = 256;
    const plan = planMemory(c, {
      weightBytes: 2,
      kvSlots: slots,
      kvContext: ctxLen,
      prefillChunk: 16,
      vocabChunk: 8192,
    });
    const kv = new KvCache(gpu, c, slots, ctxLen);
    const accounted = gpu.memory.liveBytes - before;
    const expected = plan.weights + plan.kvCache;
    kv.dispose();
    out.push({
      id: "generate.qwen05b.load",
      value: loadS,
      unit: "s",
      note: `${(w.bytes / 2 ** 20).toFixed(0)} MiB of bf16 weights (random)`,
    });
    out.push({
      id: "generate.qwen05b.memory",
      value: accounted / 2 ** 20,
      unit: "MiB",
      vs: { id: "plan.weights+kv", ratio: accounted / expected },
      note: `planned ${(expected / 2 ** 20).toFixed(0)} MiB (weights ${(plan.weights / 2 ** 20).toFixed(0)} + KV ${(plan.kvCache / 2 ** 20).toFixed(0)})`,
    });
    for (const B of [1, 8]) {
      const r = await decodeRun(gpu, model, B, 8, 3, 2, 1);
      out.push({ id: `generate.qwen05b.decode.b${B}`, value: r.decode, unit: "tok/s" });
      const ab = r.ab!;
      out.push({
        id: `generate.qwen05b.decode.b${B}.per_op`,
        value: ab.perOp,
        unit: "tok/s",
        vs: { id: `generate.qwen05b.decode.b${B}`, ratio: ab.fused / ab.perOp },
        note: `one dispatch per op; ratio: the model's decode (${ab.fused.toPrecision(4)} tok/s) over this, steps alternating`,
      });
      out.push(aheadResult(`generate.qwen05b.decode.b${B}`, r.ahead!));
    }
    out.push(...(await dispatchCounts(gpu, model, "qwen05b")));
  }
  return out;
};
export default generateSuite;
