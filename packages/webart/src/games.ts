// One training step's games, for every loop that trains on a game (`webart train`, the web app's worker): the
// step's scenarios (envs' stepScenarios), each rollout through the model's openai client as a Trajectory,
// gathered into groups, and scored by the game or by a RULER judge.
import type OpenAI from "openai";
import { gatherTrajectoryGroups, Trajectory, type GatherOptions, type TrajectoryGroup } from "@webart/engine";
import { GAMES, stepScenarios, type GameName, type StepScenarios } from "@webart/envs";
import { rulerScoreGroup } from "@webart/ruler";

export interface GameStepOptions extends StepScenarios {
  game: GameName;
  /** The model name the client serves (the run's inference name). */
  model: string;
  temperature: number;
  maxTokens: number;
  /** Score each group with a RULER judge instead of the game's reward. */
  judge?: { client: OpenAI; model: string; swallowExceptions?: boolean };
  /** Called before each rollout starts; throw to stop the step. */
  beforeRollout?: () => void;
  gather?: Omit<GatherOptions, "afterEach">;
}

export async function gameStepGroups(client: OpenAI, step: number, o: GameStepOptions): Promise<TrajectoryGroup[]> {
  const game = GAMES[o.game];
  const sampling = { model: o.model, temperature: o.temperature, maxTokens: o.maxTokens };
  const judge = o.judge;
  return gatherTrajectoryGroups(
    stepScenarios(step, o).map((group) =>
      group.map((scenario) => async () => {
        o.beforeRollout?.();
        return new Trajectory(await game.rollout(client, { ...sampling, scenario }));
      }),
    ),
    {
      ...o.gather,
      afterEach: judge
        ? (g) =>
            rulerScoreGroup(g, { client: judge.client, model: judge.model, swallowExceptions: judge.swallowExceptions })
        : undefined,
    },
  );
}
