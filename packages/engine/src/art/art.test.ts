import { describe, expect, it } from "vitest";
import { computeAdvantages } from "./advantages.ts";
import { gatherTrajectoryGroups, TooManyExceptionsError } from "./gather.ts";
import { resolveTrainConfig, DEFAULT_TRAIN_CONFIG } from "./train-config.ts";
import {
  Trajectory,
  TrajectoryGroup,
  checkRewards,
  isTrainableChoice,
  sampleHistories,
  type History,
  type SampledChoice,
} from "./trajectories.ts";

const choice = (content: string, ids?: number[]): SampledChoice => ({
  index: 0,
  finish_reason: "stop",
  logprobs: null,
  message: { role: "assistant", content, refusal: null },
  ...(ids ? { token_ids: ids, token_logprobs: ids.map(() => -0.5) } : {}),
});

describe("advantages", () => {
  it("centres rewards per group, scales by population std, and skips zero-variance groups", () => {
    const g1 = new TrajectoryGroup([{ reward: 1 }, { reward: 0 }, { reward: 0.5 }, { reward: 0.5 }]);
    const g2 = new TrajectoryGroup([{ reward: 2 }, { reward: 2 }]);
    const a = computeAdvantages([g1, g2], true);
    const std = Math.sqrt((0.25 + 0.25) / 4);
    expect(a.advantages[0][0]).toBeCloseTo(0.5 / (std + 1e-6), 10);
    expect(a.advantages[0][1]).toBeCloseTo(-0.5 / (std + 1e-6), 10);
    expect(a.advantages[0][2]).toBe(0);
    expect(a.advantages[1]).toEqual([0, 0]);
    expect(a.groupsTrainable).toBe(1);
    expect(a.groupsZeroVariance).toBe(1);
    expect(computeAdvantages([g1], false).advantages[0][0]).toBeCloseTo(0.5, 12);
  });
});

describe("TrainConfig", () => {
  it("has ART's defaults and rejects unknown keys and bad values by name", () => {
    expect(resolveTrainConfig().learningRate).toBe(5e-6);
    expect(resolveTrainConfig({ epsilon: 0.3 }).epsilonHigh).toBe(0.3);
    expect(resolveTrainConfig({ epsilon: 0.3, epsilonHigh: 0.5 }).epsilonHigh).toBe(0.5);
    expect(() => resolveTrainConfig({ learning_rate: 1 } as never)).toThrow(/unknown key "learning_rate"/);
    expect(() => resolveTrainConfig({ lossType: "mean" as never })).toThrow(/lossType: "mean"/);
    expect(() => resolveTrainConfig({ learningRate: -1 })).toThrow(/learningRate: must be > 0/);
    expect(() => resolveTrainConfig({ beta: "0" as never })).toThrow(/beta: expected a number/);
    expect(Object.isFrozen(DEFAULT_TRAIN_CONFIG)).toBe(true);
    expect(resolveTrainConfig().maxHistoriesPerTrajectory).toBe(0);
    expect(() => resolveTrainConfig({ maxHistoriesPerTrajectory: 2.5 })).toThrow(
      /maxHistoriesPerTrajectory: must be a whole number/,
    );
    expect(() => resolveTrainConfig({ maxHistoriesPerTrajectory: -1 })).toThrow(
      /maxHistoriesPerTrajectory: must be >= 0/,
    );
    expect(resolveTrainConfig().anchorContextTurns).toBe(false);
    expect(resolveTrainConfig({ anchorContextTurns: true, beta: 0.05 }).anchorContextTurns).toBe(true);
    expect(() => resolveTrainConfig({ anchorContextTurns: true })).toThrow(/anchorContextTurns: .*set either > 0/);
    expect(resolveTrainConfig({ anchorContextTurns: true, anchorBeta: 0.05 }).beta).toBe(0);
    expect(() => resolveTrainConfig({ anchorBeta: -1 })).toThrow(/anchorBeta: must be >= 0/);
    expect(() => resolveTrainConfig({ anchorContextTurns: true, beta: 0.1, importanceSampling: "sequence" })).toThrow(
      /anchorContextTurns: needs importanceSampling "token"/,
    );
  });
});

describe("sampleHistories", () => {
  const hs: History[] = Array.from({ length: 40 }, (_, i) => ({
    messagesAndChoices: [{ role: "user", content: String(i) }],
  }));
  const ids = (x: History[]) => x.map((h) => Number((h.messagesAndChoices[0] as { content: string }).content));
  it("keeps all when the cap is 0 or not reached", () => {
    expect(sampleHistories(hs, 0, 1)).toBe(hs);
    expect(sampleHistories(hs, 40, 1)).toBe(hs);
  });
  it("keeps the last history and a seeded uniform sample of the rest, in order", () => {
    const a = ids(sampleHistories(hs, 8, 7));
    expect(a.length).toBe(8);
    expect(a[7]).toBe(39);
    expect(new Set(a).size).toBe(8);
    expect([...a].sort((x, y) => x - y)).toEqual(a);
    expect(ids(sampleHistories(hs, 8, 7))).toEqual(a);
    expect(ids(sampleHistories(hs, 8, 8))).not.toEqual(a);
    // Uniform over the other 39: each is kept 7/39 of the time.
    const counts = new Array(39).fill(0);
    const n = 4000;
    for (let s = 0; s < n; s++) for (const i of ids(sampleHistories(hs, 8, s)).slice(0, -1)) counts[i]++;
    for (const c of counts) expect(Math.abs(c / n - 7 / 39)).toBeLessThan(0.035);
  });
});

describe("trajectories", () => {
  it("knows which turns are trainable and round-trips ART's JSON shape", () => {
    const t = new Trajectory({
      messagesAndChoices: [{ role: "user", content: "hi" }, choice("a", [1, 2]), choice("b")],
      reward: 0.5,
      metrics: { win: true },
    });
    expect(isTrainableChoice(t.messagesAndChoices[1])).toBe(true);
    expect(isTrainableChoice(t.messagesAndChoices[2])).toBe(false);
    expect(t.messages()[1]).toEqual({ role: "assistant", content: "a" });
    const j = JSON.parse(JSON.stringify(t));
    expect(j.messages_and_choices[1].trainable).toBe(true);
    const back = Trajectory.fromJSON(j);
    expect(back.reward).toBe(0.5);
    expect((back.messagesAndChoices[1] as SampledChoice).token_ids).toEqual([1, 2]);
    expect(new Trajectory({ messagesAndChoices: [choice("x")] }).hasTrainableTurns()).toBe(false);
  });
});

describe("rewards", () => {
  it("an unset reward is not 0: checkRewards names the group and trajectory; an explicit 0 passes", () => {
    const unset = new Trajectory({ messagesAndChoices: [choice("a", [1])] });
    expect(Number.isNaN(unset.reward)).toBe(true);
    expect(Number.isNaN(Trajectory.fromJSON(JSON.parse(JSON.stringify(unset))).reward)).toBe(true);
    const ok = new TrajectoryGroup([{ reward: 0 }, { reward: 1 }]);
    expect(() => checkRewards([ok], "train")).not.toThrow();
    expect(() => checkRewards([ok, new TrajectoryGroup([{ reward: 0 }, unset])], "train")).toThrow(
      "train: trajectory 1 of group 1 has no reward: set trajectory.reward before training",
    );
    expect(() => checkRewards([new TrajectoryGroup([{ reward: Infinity }])], "log")).toThrow(
      "log: trajectory 0 of group 0 has reward Infinity, not a finite number: set trajectory.reward before logging",
    );
  });
});

describe("gatherTrajectoryGroups", () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("bounds concurrency, reports progress and captures exceptions up to maxExceptions", async () => {
    let active = 0;
    let peak = 0;
    const rollout =
      (r: number, fail = false) =>
      async () => {
        active++;
        peak = Math.max(peak, active);
        await sleep(5);
        active--;
        if (fail) throw new Error(`boom ${r}`);
        return new Trajectory({ reward: r });
      };
    const progress: number[] = [];
    const groups = await gatherTrajectoryGroups(
      [
        [rollout(1), rollout(0), rollout(1)],
        [rollout(0), rollout(0, true), rollout(1)],
      ],
      { concurrency: 2, maxExceptions: 1, onProgress: (p) => progress.push(p.done), progressBar: "off" },
    );
    expect(peak).toBe(2);
    expect(progress).toEqual([1, 2, 3, 4, 5, 6]);
    expect(groups[1].trajectories).toHaveLength(2);
    expect(groups[1].exceptions[0].message).toBe("boom 0");
    await expect(
      gatherTrajectoryGroups([[rollout(0, true), rollout(1, true), rollout(1)]], {
        maxExceptions: 0.5,
        progressBar: "off",
      }),
    ).rejects.toBeInstanceOf(TooManyExceptionsError);
  });

  it("lets afterEach rescore, drop or split groups", async () => {
    const g = () => [async () => ({ reward: 1 }), async () => ({ reward: 0 })];
    const out = await gatherTrajectoryGroups([g(), g(), g()], {
      progressBar: "off",
      afterEach: (grp) => {
        if (grp === undefined) return null;
        return grp.trajectories[0].reward === 1
          ? new TrajectoryGroup(grp.trajectories.map((t) => ({ reward: t.reward * 2 })))
          : null;
      },
    });
    expect(out.map((x) => x.rewards())).toEqual([
      [2, 0],
      [2, 0],
      [2, 0],
    ]);
  });
});
