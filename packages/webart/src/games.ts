// One training step's games, for every loop that trains on a game (`webart train`, the web app's worker): the
// step's scenarios (envs' stepScenarios), each rollout through the model's openai client as a Trajectory,
// gathered into groups, and scored by the game or by a RULER judge.
import type OpenAI from "openai";
import { gatherTrajectoryGroups, Trajectory, type GatherOptions, type TrajectoryGroup } from "@webart/engine";
import { GAMES, stepScenarios, type GameName, type SamplingOptions, type StepScenarios } from "@webart/envs";
import { rulerScoreGroup } from "@webart/ruler";

export interface GameStepOptions extends StepScenarios {
  game: GameName;
  /** The model name the client serves (the run's inference name). */
  model: string;
  temperature: number;
  maxTokens: number;
  /** Tool-using games (email): "required" forces a tool call every turn, "guided" also limits its values (default "auto"). */
  toolChoice?: SamplingOptions["toolChoice"];
  /** Score each group with a RULER judge instead of the game's reward. */
  judge?: { client: OpenAI; model: string; requestParams?: Record<string, unknown>; swallowExceptions?: boolean };
  /** Called before each rollout starts; throw to stop the step. */
  beforeRollout?: () => void;
  gather?: Omit<GatherOptions, "afterEach">;
  /**
   * Dynamic sampling (DAPO): draw up to this many groups in all, drawing more after the first `groupsPerStep` while
   * fewer than `groupsPerStep` of them have rewards that differ (a group whose rollouts all score the same trains
   * nothing). Default `groupsPerStep`: no more are drawn.
   */
  maxGroups?: number;
}

/** Whether a group's rewards differ, so that it has advantages to train on. */
export const groupVaries = (g: TrajectoryGroup): boolean => new Set(g.rewards()).size > 1;

export async function gameStepGroups(client: OpenAI, step: number, o: GameStepOptions): Promise<TrajectoryGroup[]> {
  const game = GAMES[o.game];
  const sampling = {
    model: o.model,
    temperature: o.temperature,
    maxTokens: o.maxTokens,
    ...(o.toolChoice ? { toolChoice: o.toolChoice } : {}),
  };
  const judge = o.judge;
  const draw = (from: number, count: number) =>
    gatherTrajectoryGroups(
      stepScenarios(step, o, { from, count }).map((group) =>
        group.map((scenario) => async () => {
          o.beforeRollout?.();
          return new Trajectory(await game.rollout(client, { ...sampling, scenario }));
        }),
      ),
      {
        ...o.gather,
        afterEach: judge
          ? (g) =>
              rulerScoreGroup(g, {
                client: judge.client,
                model: judge.model,
                requestParams: judge.requestParams,
                swallowExceptions: judge.swallowExceptions,
              })
          : undefined,
      },
    );
  return drawUntilVaried(draw, o.groupsPerStep, o.maxGroups ?? o.groupsPerStep);
}

/**
 * Dynamic sampling: `draw(from, count)` groups from index 0, first `want`, then as many more as are still missing
 * while fewer than `want` groups vary, up to `max` drawn in all. Returns every group drawn, in index order.
 */
export async function drawUntilVaried(
  draw: (from: number, count: number) => Promise<TrajectoryGroup[]>,
  want: number,
  max: number,
): Promise<TrajectoryGroup[]> {
  const groups = await draw(0, want);
  let drawn = want;
  let varied = groups.filter(groupVaries).length;
  while (varied < want && drawn < max) {
    const count = Math.min(want - varied, max - drawn);
    const more = await draw(drawn, count);
    drawn += count;
    groups.push(...more);
    varied += more.filter(groupVaries).length;
  }
  return groups;
}
