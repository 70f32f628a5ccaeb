// Measures what the memory planner promises: the device's peak live bytes (the buffer pool's accounting)
// over the largest inference step the scheduler can make, and over one GRPO step, on a loaded engine.
import { Rng } from "@webart/gpu";
import { freeSample } from "./generate/scheduler.ts";
import type { Engine } from "./engine.ts";
import { accumulateGradients, optimizerStep, type TrainSequence } from "./train/grpo.ts";

/** Peak live bytes of one step of `prefill` prompt tokens in slot 0 plus one decode token in every other slot, and the
 *  largest buffer it asked for (BufferPool's largestBuffer). */
export async function measureInference(
  engine: Engine,
  prefill: number,
): Promise<{ peak: number; tokens: number; largestBuffer: number }> {
  const runner = engine.runner;
  const gpu = engine.gpu;
  const slots = runner.slots;
  const P = Math.min(prefill, runner.maxContext);
  const N = P + slots - 1;
  const ids = new Uint32Array(N);
  const slotOf = new Uint32Array(N);
  const pos = new Uint32Array(N);
  for (let i = 0; i < P; i++) pos[i] = i;
  for (let s = 1; s < slots; s++) slotOf[P + s - 1] = s;
  const rows = [P - 1, ...Array.from({ length: slots - 1 }, (_, s) => P + s)];
  const samples = rows.map((row, i) => freeSample(row, i, 0, 1));
  await gpu.sync();
  gpu.pool.resetPeak();
  await engine.scheduler.exclusive(() => runner.step({ ids, slots: slotOf, pos }, samples));
  return { peak: gpu.pool.stats.peakLiveBytes, tokens: N, largestBuffer: gpu.pool.stats.largestBuffer };
}

/** Peak live bytes of a decode run (ModelRunner.decode, as the scheduler makes one: `steps` steps submitted back to
 *  back, replaying the captured step) of one token in every slot at position `at`, and the largest buffer it asked
 *  for. */
export async function measureDecodeRun(
  engine: Engine,
  steps: number,
  at = 8,
): Promise<{ peak: number; largestBuffer: number; replays: number; tapeBytes: number }> {
  const runner = engine.runner;
  const gpu = engine.gpu;
  const S = runner.slots;
  const ids = Uint32Array.from({ length: S }, (_, s) => (s * 7 + 1) % engine.config.vocabSize);
  const slotOf = Uint32Array.from({ length: S }, (_, s) => s);
  const pos = new Uint32Array(S).fill(Math.min(at, runner.maxContext - steps));
  const samples = Array.from({ length: S }, (_, s) => freeSample(s, s, 0, 1));
  await gpu.sync();
  gpu.pool.resetPeak();
  const before = runner.tapeStats.replays;
  let tapeBytes = 0;
  await engine.scheduler.exclusive(async () => {
    await runner.decode({ ids, slots: slotOf, pos }, samples, steps);
    tapeBytes = runner.tapeBytes;
  });
  const stats = gpu.pool.stats;
  const replays = runner.tapeStats.replays - before;
  return { peak: stats.peakLiveBytes, largestBuffer: stats.largestBuffer, replays, tapeBytes };
}

type GrpoBatch = {
  batch: number;
  length: number;
  microBatchTokens: number;
  recompute: boolean;
  vocabChunk: number;
  seed?: number;
  /** Read each token's logprob back, as an SFT step does. */
  newLogprobs?: boolean;
};

/** `batch` sequences of `length` random tokens, the last 3/4 trained, advantages +1 and -1 in turn. */
function randomBatch(engine: Engine, o: GrpoBatch): TrainSequence[] {
  const rng = new Rng(o.seed ?? 1);
  const V = engine.config.vocabSize;
  return Array.from({ length: o.batch }, (_, b) => ({
    ids: Array.from({ length: o.length }, () => rng.int(V)),
    mask: Array.from({ length: o.length }, (_, t) => (t >= o.length / 4 ? 1 : 0)),
    oldLogprobs: new Array(o.length).fill(NaN),
    advantage: b % 2 ? 1 : -1,
    coef: 1 / (o.batch * o.length),
  }));
}

const gradients = (engine: Engine, seqs: TrainSequence[], o: GrpoBatch) =>
  accumulateGradients(
    engine.model,
    seqs,
    {
      loss: "ppo",
      level: "token",
      epsilon: 0.2,
      epsilonHigh: 0.2,
      beta: 0,
      microBatchTokens: o.microBatchTokens,
      recompute: o.recompute,
      vocabChunk: o.vocabChunk,
    },
    { newLogprobs: o.newLogprobs },
  );

/** Peak live bytes of one GRPO step (gradients and AdamW) on `batch` sequences of `length` random tokens, and the
 *  largest buffer it asked for. */
export async function measureGrpoStep(
  engine: Engine,
  o: GrpoBatch,
): Promise<{ peak: number; ms: number; microBatches: number; largestBuffer: number }> {
  const lora = engine.model.lora;
  if (!lora) throw new Error("measureGrpoStep: attach a LoRA adapter first");
  lora.ensureOptimizer();
  const gpu = engine.gpu;
  const seqs = randomBatch(engine, o);
  await gpu.sync();
  gpu.pool.resetPeak();
  const t0 = performance.now();
  let microBatches = 0;
  await engine.scheduler.exclusive(async () => {
    const r = await gradients(engine, seqs, o);
    microBatches = r.microBatches;
    gpu.release(r.totals, r.entropyAll);
    await optimizerStep(engine.model, { lr: 0, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 }, 1);
  });
  const largestBuffer = gpu.pool.stats.largestBuffer;
  return { peak: gpu.pool.stats.peakLiveBytes, ms: performance.now() - t0, microBatches, largestBuffer };
}

/** The LoRA gradients (the adapter's flat layout) of the loss on the same random batch as measureGrpoStep, without
 *  an optimizer step, and the dispatches they took: to compare kernel paths (tensor cores in backward or not, gate
 *  and up as one matmul or two) on one batch. */
export async function loraGradients(
  engine: Engine,
  o: GrpoBatch,
): Promise<{ grads: Float32Array; dispatches: number }> {
  const lora = engine.model.lora;
  if (!lora) throw new Error("loraGradients: attach a LoRA adapter first");
  lora.ensureOptimizer();
  const gpu = engine.gpu;
  const seqs = randomBatch(engine, o);
  return engine.scheduler.exclusive(async () => {
    const r = await gradients(engine, seqs, o);
    gpu.release(r.totals, r.entropyAll);
    const rec = gpu.recorder();
    const read = rec.read(lora.grads!, lora.size * 4);
    await rec.submit();
    return { grads: new Float32Array(await read), dispatches: r.dispatches };
  });
}
