// rulerScoreGroup(): rewards a TrajectoryGroup with RULER scores (old reward kept as a metric),
// shaped to serve as gatherTrajectoryGroups' afterEach.
import { Trajectory, TrajectoryGroup } from "@webart/engine";
import { ruler, warner, type RulerOptions } from "./ruler.ts";

export interface RulerGroupOptions extends RulerOptions {
  /** On a judge failure return null (gatherTrajectoryGroups then drops the group) instead of throwing. */
  swallowExceptions?: boolean;
}

/**
 * A new group whose rewards are the judge's scores: the previous reward is kept in
 * metrics.independent_reward, the score in metrics.ruler_score, the explanation appended to logs.
 * The input group is not modified. Tools shown to the judge are opts.tools, else the first
 * trajectory's. A trajectory with additionalHistories is refused (thrown even with swallowExceptions,
 * since it is a usage error): the judge sees one conversation per trajectory and scoring only the
 * main history would hide what the others did.
 */
export async function rulerScoreGroup(
  group: TrajectoryGroup,
  opts: RulerGroupOptions,
): Promise<TrajectoryGroup | null> {
  const { swallowExceptions = false, ...rulerOpts } = opts;
  group.trajectories.forEach((t, i) => {
    if (t.additionalHistories.length) {
      throw new Error(
        `rulerScoreGroup: trajectory ${i} has ${t.additionalHistories.length} additionalHistories; RULER judges ` +
          "one conversation per trajectory. Score such groups with ruler() over the message lists you want judged.",
      );
    }
  });
  if (group.trajectories.length === 0) return new TrajectoryGroup([], [...group.exceptions]);
  const tools = rulerOpts.tools ?? group.trajectories.find((t) => t.tools?.length)?.tools;
  let scores;
  try {
    scores = await ruler(
      group.trajectories.map((t) => t.messagesAndChoices),
      { ...rulerOpts, tools },
    );
  } catch (e) {
    if (!swallowExceptions) throw e;
    warner(opts.debug)(`rulerScoreGroup: dropping the group: ${e instanceof Error ? e.message : String(e)}`);
    return null;
  }
  // ruler() numbers the trajectories "1".."n" in order; match by that id, not by position.
  const byId = new Map(scores.map((s) => [s.trajectoryId, s]));
  const rescored = group.trajectories.map((t, i) => {
    const s = byId.get(String(i + 1));
    if (!s) throw new Error(`rulerScoreGroup: no score for trajectory ${i + 1}`);
    return new Trajectory({
      messagesAndChoices: [...t.messagesAndChoices],
      reward: s.score,
      // The rollout's own reward, when it set one.
      metrics: {
        ...t.metrics,
        ...(Number.isFinite(t.reward) ? { independent_reward: t.reward } : {}),
        ruler_score: s.score,
      },
      metadata: { ...t.metadata },
      logs: [...t.logs, `RULER score ${s.score}: ${s.explanation}`],
      tools: t.tools,
      additionalHistories: [],
    });
  });
  return new TrajectoryGroup(rescored, [...group.exceptions]);
}
