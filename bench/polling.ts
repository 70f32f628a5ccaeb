// `npm run bench -- polling`: how Dawn's polling for finished GPU work (WEBART_DAWN_POLL; @webart/gpu's polling.ts)
// changes a GRPO step on this device. The same step, 2 groups of 8 tic-tac-toe games (each game its own scenario,
// greedy, so every round does the same work) and a training pass over them at learning rate 1e-9, runs in rounds that
// alternate Dawn's own setImmediate loop with polls on a ~1 ms timer. Prints each mode's rollout and training seconds
// and the process's CPU seconds, and the ratio of the two modes taken in the same run.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gatherTrajectoryGroups, LocalBackend, TrainableModel, Trajectory } from "@webart/engine";
import { rolloutTicTacToe } from "@webart/envs";
import { dawnPolling, setDawnPolling, type DawnPolling } from "@webart/gpu";
import type { BenchContext, BenchResult, Suite } from "./harness.ts";
import { TINY } from "./models.ts";

export const pollingSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const initial = dawnPolling().mode;
  const backend = new LocalBackend({
    path: mkdtempSync(join(tmpdir(), "webart-bench-")),
    engine: { gpu: ctx.gpu, kvSlots: 16, maxContext: 512 },
  });
  const model = new TrainableModel({ name: "poll", project: "bench", baseModel: TINY });
  await model.register(backend);
  const client = model.openaiClient();
  const step = async () => {
    const t0 = performance.now();
    const groups = await gatherTrajectoryGroups(
      [0, 1].map((g) =>
        Array.from(
          { length: 8 },
          (_, i) => async () =>
            new Trajectory(
              await rolloutTicTacToe(client, {
                model: "poll",
                scenario: { seed: 100 * g + i },
                temperature: 0,
                maxTokens: 12,
              }),
            ),
        ),
      ),
      { progressBar: "off" },
    );
    const t1 = performance.now();
    await model.train(groups, { learningRate: 1e-9 }); // ~no change: every round trains the same
    return { rollout: (t1 - t0) / 1000, train: (performance.now() - t1) / 1000 };
  };
  await step(); // warm: pipelines compiled, buffers pooled, prefix cache filled the same way for every round
  const modes: DawnPolling[] = ["immediate", "timer"];
  const sum = Object.fromEntries(modes.map((m) => [m, { rollout: 0, train: 0, cpu: 0 }]));
  const rounds = ctx.quick ? 1 : 3;
  try {
    for (let r = 0; r < rounds; r++) {
      for (const m of r % 2 ? [...modes].reverse() : modes) {
        setDawnPolling(m);
        const c0 = process.cpuUsage();
        const t = await step();
        const c = process.cpuUsage(c0);
        sum[m].rollout += t.rollout / rounds;
        sum[m].train += t.train / rounds;
        sum[m].cpu += (c.user + c.system) / 1e6 / rounds;
      }
    }
  } finally {
    setDawnPolling(initial);
    await backend.close();
  }
  const out: BenchResult[] = [];
  for (const m of modes) {
    const s = sum[m];
    out.push({
      id: `polling.${m}.step`,
      value: s.rollout + s.train,
      unit: "s",
      note: `rollouts ${s.rollout.toFixed(2)} s, training ${s.train.toFixed(2)} s; ${s.cpu.toFixed(1)} CPU s (all threads)`,
      ...(m === "timer"
        ? {
            vs: {
              id: "polling.immediate.step",
              ratio: (sum.immediate.rollout + sum.immediate.train) / (s.rollout + s.train),
            },
          }
        : {}),
    });
  }
  out.push({
    id: "polling.timer.cpu",
    value: sum.timer.cpu,
    unit: "CPU s",
    vs: { id: "polling.immediate.cpu", ratio: sum.immediate.cpu / sum.timer.cpu },
    note: `a step's CPU time with timer polls (Dawn's own loop: ${sum.immediate.cpu.toFixed(1)} s); the default here is ${initial}`,
  });
  return out;
};
export default pollingSuite;
