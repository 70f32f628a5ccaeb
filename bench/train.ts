// `npm run bench -- train`: the split of a GRPO step (rollout, tokenize, forward/backward, optimizer,
// checkpoint) and training tokens/s on the embedded model (tic-tac-toe rollouts), the engine steps a rollout takes,
// and the memory planner's figures, without allocating, for Qwen2.5-0.5B and 1.5B LoRA GRPO with groups of 8 x 512
// tokens. WEBART_BENCH_PROFILE=1 also prints where the GPU time of rollouts and of training goes, per kernel.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  LocalBackend,
  LORA_TARGETS,
  TrainableModel,
  TrajectoryGroup,
  gatherTrajectoryGroups,
  parseConfig,
  planMemory,
  Trajectory,
} from "@webart/engine";
import { rolloutTicTacToe } from "@webart/envs";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";
import { configJson, TINY } from "./models.ts";

export const trainSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const out: BenchResult[] = [];
  const gpu = process.env.WEBART_BENCH_PROFILE ? await ctx.device({ profile: true }) : ctx.gpu;
  if (process.env.WEBART_BENCH_PROFILE && !gpu.profiling) ctx.log("train: this device has no timestamp queries");
  const backend = new LocalBackend({
    path: mkdtempSync(join(tmpdir(), "webart-bench-")),
    engine: { gpu, kvSlots: 32, maxContext: 512 },
  });
  const model = new TrainableModel({ name: "bench", project: "bench", baseModel: TINY });
  await model.register(backend);
  const client = model.openaiClient();
  const scheduler = backend.engine(model.spec).scheduler;
  const profiles = { rollout: new Map<string, number>(), training: new Map<string, number>() };
  const takeProfile = (into: Map<string, number>) => {
    for (const r of gpu.profileTable()) into.set(r.name, (into.get(r.name) ?? 0) + r.ms);
    gpu.profile.clear();
  };
  let engineSteps = 0;
  const calls = { rounds: 0, runs: 0 };
  const steps = ctx.quick ? 1 : 3;
  const groups = 2;
  const size = ctx.quick ? 4 : 8;
  const sum = { rollout: 0, tokenize: 0, fb: 0, opt: 0, ckpt: 0, tokens: 0 };
  const rollouts = (s: number): Promise<TrajectoryGroup[]> =>
    gatherTrajectoryGroups(
      Array.from({ length: groups }, (_, g) =>
        Array.from(
          { length: size },
          () => async () =>
            new Trajectory(
              await rolloutTicTacToe(client, {
                model: "bench",
                scenario: { seed: 1000 * s + 10 * g },
                temperature: 1,
                maxTokens: 12,
              }),
            ),
        ),
      ),
      { progressBar: "off" },
    );
  for (let s = 0; s < steps; s++) {
    gpu.profile.clear();
    const steps0 = scheduler.stats.steps;
    const st0 = { ...scheduler.stats };
    const t0 = performance.now();
    const gs = await rollouts(s);
    sum.rollout += (performance.now() - t0) / 1000;
    engineSteps += scheduler.stats.steps - steps0;
    calls.rounds += scheduler.stats.rounds - st0.rounds;
    calls.runs += scheduler.stats.decodeRuns - st0.decodeRuns;
    takeProfile(profiles.rollout);
    const r = await model.train(gs, { learningRate: 1e-4 });
    takeProfile(profiles.training);
    const m = r.metrics;
    sum.tokenize += m.time_tokenize;
    sum.fb += m.time_forward_backward;
    sum.opt += m.time_optimizer;
    sum.ckpt += m.time_checkpoint;
    sum.tokens += m.tokens_per_second * m.time_forward_backward;
  }
  const total = sum.rollout + sum.tokenize + sum.fb + sum.opt + sum.ckpt;
  for (const [k, v] of Object.entries({
    rollout: sum.rollout,
    tokenize: sum.tokenize,
    forward_backward: sum.fb,
    optimizer: sum.opt,
    checkpoint: sum.ckpt,
  })) {
    out.push({
      id: `train.step.${k}`,
      value: v / steps,
      unit: "s",
      note: `${((100 * v) / total).toFixed(1)}% of the step`,
    });
  }
  out.push({
    id: "train.tokens_per_second",
    value: sum.fb ? sum.tokens / sum.fb : 0,
    unit: "tok/s",
    note: `forward+backward, ${groups}x${size} trajectories per step`,
  });
  out.push({
    id: "train.rollout.engine_steps",
    value: engineSteps / steps,
    unit: "steps",
    note: `a step's ${groups * size} games, batched; ${((1000 * sum.rollout) / engineSteps).toFixed(0)} ms an engine step`,
  });
  out.push({
    id: "train.rollout.rounds",
    value: calls.rounds / steps,
    unit: "rounds",
    vs: { id: "train.rollout.engine_steps", ratio: calls.rounds / engineSteps },
    note: `the model's calls a step (each waits on one readback): single steps, and ${(calls.runs / steps).toFixed(1)} runs of up to 8 steps`,
  });
  for (const [phase, m] of Object.entries(profiles)) {
    const total = [...m.values()].reduce((a, b) => a + b, 0);
    if (!total) continue;
    const top = [...m].sort((a, b) => b[1] - a[1]).slice(0, 8);
    ctx.log(
      `GPU time of ${phase}, ${(total / steps).toFixed(0)} ms a step: ` +
        top.map(([k, ms]) => `${k} ${((100 * ms) / total).toFixed(0)}%`).join(", "),
    );
  }
  // The same rollouts with a setting on and off, alternating: the seeds of the steps above, so each pair plays the
  // same scenarios. Seconds a step each way; `set` is left on.
  const engine = backend.engine(model.spec);
  const alternate = async (set: (on: boolean) => void): Promise<{ on: number; off: number }> => {
    const time = { on: 0, off: 0 };
    for (let s = 0; s < 2 * steps; s++) {
      const on = s % 2 === 1;
      set(on);
      const t0 = performance.now();
      await rollouts(Math.floor(s / 2));
      time[on ? "on" : "off"] += (performance.now() - t0) / 1000 / steps;
    }
    takeProfile(new Map());
    return time;
  };
  // The adapter merged into the (f32) weights and its LoRA terms run apart (Model.mergeLora).
  const merge = engine.model.mergeLora;
  const time = await alternate((on) => (engine.model.mergeLora = on));
  engine.model.mergeLora = merge;
  out.push({
    id: "train.step.rollout.lora_apart",
    value: time.off,
    unit: "s",
    vs: { id: "train.step.rollout.merged", ratio: time.off / time.on },
    note: `a step's rollouts with the LoRA terms apart (mergeLora off); ratio: over the same rollouts on the merged weights (${time.on.toFixed(3)} s), alternating`,
  });
  // Decode steps replayed from their tape and recorded by the model's code each time (ModelRunner.replay).
  const replay = await alternate((on) => (engine.runner.replay = on));
  out.push({
    id: "train.step.rollout.replay_off",
    value: replay.off,
    unit: "s",
    vs: { id: "train.step.rollout.replayed", ratio: replay.off / replay.on },
    note: `a step's rollouts, each decode step recorded by the model's code (ModelRunner.replay off); ratio: over the same rollouts replayed from their tape (${replay.on.toFixed(3)} s), alternating`,
  });
  await backend.close();
  // The planner, without allocating: LoRA GRPO on groups of 8 x 512 tokens (one micro-batch of 4096).
  for (const [id, c] of [
    ["qwen2.5-0.5b", parseConfig(configJson("qwen2.5-0.5b"))],
    ["qwen2.5-1.5b", parseConfig(configJson("qwen2.5-1.5b"))],
  ] as const) {
    const p = planMemory(c, {
      weightBytes: 2,
      kvSlots: 8,
      kvContext: 1024,
      prefillChunk: 256,
      vocabChunk: 8192,
      lora: { rank: 8, targets: LORA_TARGETS },
      train: { microBatchTokens: 8 * 512, recompute: true },
    });
    ctx.log(`${id}:\n  ${p.lines.join("\n  ")}`);
    out.push({
      id: `plan.${id}.lora_grpo_8x512`,
      value: p.total / 2 ** 30,
      unit: "GiB",
      note: `weights ${(p.weights / 2 ** 30).toFixed(2)}, training ${(p.training / 2 ** 30).toFixed(2)}, kv ${(p.kvCache / 2 ** 30).toFixed(2)} GiB`,
    });
  }
  return out;
};
export default trainSuite;
