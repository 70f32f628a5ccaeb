// Group-relative advantages (GRPO): reward minus the group mean, optionally divided by the group's
// population std (+1e-6). Zero-variance groups carry no signal and are counted, not trained on.
import type { TrajectoryGroup } from "./trajectories.ts";

export interface GroupAdvantages {
  /** One advantage per trajectory of each group (same order). */
  advantages: number[][];
  groupsTrainable: number;
  groupsZeroVariance: number;
  rewardMean: number;
  rewardStd: number;
  /** Mean over groups of the within-group std ("reward_std_dev" in ART). */
  meanGroupStd: number;
}

export function computeAdvantages(groups: TrajectoryGroup[], scaleRewards: boolean): GroupAdvantages {
  const advantages: number[][] = [];
  let trainable = 0;
  let zeroVar = 0;
  const all: number[] = [];
  let stdSum = 0;
  for (const g of groups) {
    const r = g.rewards();
    all.push(...r);
    if (r.length === 0) {
      advantages.push([]);
      continue;
    }
    const mean = r.reduce((a, b) => a + b, 0) / r.length;
    const std = Math.sqrt(r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length);
    stdSum += std;
    if (std === 0) {
      zeroVar++;
      advantages.push(r.map(() => 0));
      continue;
    }
    trainable++;
    advantages.push(r.map((x) => (scaleRewards ? (x - mean) / (std + 1e-6) : x - mean)));
  }
  const mean = all.length ? all.reduce((a, b) => a + b, 0) / all.length : 0;
  const std = all.length ? Math.sqrt(all.reduce((a, b) => a + (b - mean) ** 2, 0) / all.length) : 0;
  return {
    advantages,
    groupsTrainable: trainable,
    groupsZeroVariance: zeroVar,
    rewardMean: mean,
    rewardStd: std,
    meanGroupStd: groups.length ? stdSum / groups.length : 0,
  };
}
