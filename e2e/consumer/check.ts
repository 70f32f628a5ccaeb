// (c) A strict TypeScript user of the public API, type-checked against the shipped .d.ts files. The lines marked
// as expected errors fail the check if the types were `any` (a declaration that did not resolve).
import {
  gatherTrajectoryGroups,
  LocalBackend,
  RemoteBackend,
  TrainableModel,
  Trajectory,
  TrajectoryGroup,
  type TrainConfig,
  type TrainResult,
  type TrainSftConfig,
} from "webart";
import { rulerScoreGroup, type RulerGroupOptions } from "webart/ruler";
import { rolloutTicTacToe, summarizeTicTacToe } from "webart/envs";
import { Engine, EMBEDDED_MODEL, planTraining, type MemoryPlan } from "webart/engine";

export async function train(remote: boolean): Promise<TrainResult> {
  const model = new TrainableModel({
    name: "typed",
    project: "consumer",
    baseModel: EMBEDDED_MODEL,
    lora: { rank: 4 },
  });
  const backend = remote ? new RemoteBackend("http://127.0.0.1:8000") : new LocalBackend({ path: ".art" });
  await model.register(backend);
  const client = model.openaiClient();
  const groups: TrajectoryGroup[] = await gatherTrajectoryGroups(
    [0, 1].map((g) =>
      [0, 1, 2].map(
        () => async () =>
          new Trajectory(await rolloutTicTacToe(client, { model: model.getInferenceName(), scenario: { seed: g } })),
      ),
    ),
    { maxExceptions: 0.5 },
  );
  const judged = await rulerScoreGroup(groups[0], { client, model: "judge" } satisfies RulerGroupOptions);
  const warm: Partial<TrainSftConfig> = { learningRate: [1e-4, 5e-5], batchSize: 2, assistantTurns: "last" };
  const sftLoss: number = (await model.trainSft(groups[0].trajectories, warm)).metrics.loss;
  void sftLoss;
  // @ts-expect-error assistantTurns is "all" or "last"
  const badTurns: Partial<TrainSftConfig> = { assistantTurns: "first" };
  void badTurns;
  const config: Partial<TrainConfig> = { learningRate: 1e-4, recompute: "auto" };
  // @ts-expect-error learningRate is a number
  const wrong: Partial<TrainConfig> = { learningRate: "fast" };
  void wrong;
  const summary: number = summarizeTicTacToe(groups.flatMap((g) => g.trajectories)).legalMoves;
  void summary;
  void judged;
  return model.train(groups, config);
}

export async function chat(): Promise<string | null> {
  const engine: Engine = await Engine.load(EMBEDDED_MODEL);
  const reply = await engine
    .openaiClient()
    .chat.completions.create({ model: "webart-tiny", messages: [{ role: "user", content: "hi" }] });
  // @ts-expect-error an Engine has no such method
  engine.trainOnVibes();
  const plan: MemoryPlan | null = null;
  void plan;
  void planTraining;
  return reply.choices[0].message.content;
}
