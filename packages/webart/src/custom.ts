// A task of your own, trained with RULER rewards, for every loop that trains one (the web app's worker, a Node
// script): a training step's groups (one scenario per group, each group judged together), the validation that
// scores the base model (adapter off) against the current checkpoint on held-out scenarios with the same judge,
// and a check that a judge answers in RULER's JSON schema before a run starts.
import type OpenAI from "openai";
import { gatherTrajectoryGroups, Trajectory, TrajectoryGroup, type GatherOptions, type Engine } from "@webart/engine";
import {
  customStepScenarios,
  rolloutCustom,
  scenarioNotes,
  type CustomScenario,
  type CustomTask,
  type TrajectoryLike,
} from "@webart/envs";
import { DEFAULT_RUBRIC, ruler, rulerScoreGroup, RulerError, type RulerOptions } from "@webart/ruler";

/** The judge: a client and model name at an OpenAI-compatible endpoint, or a Model (e.g. the loaded model). */
export type CustomJudge = Pick<RulerOptions, "client" | "model" | "requestParams">;

export interface CustomStepOptions {
  task: CustomTask;
  /** The training scenarios (see splitScenarios). */
  train: readonly CustomScenario[];
  groupsPerStep: number;
  groupSize: number;
  /** The model name the client serves (the run's inference name). */
  model: string;
  temperature: number;
  maxTokens: number;
  judge: CustomJudge;
  /** What a good conversation is (default: RULER's default rubric). */
  rubric?: string;
  /** Called before each rollout starts; throw to stop the step. */
  beforeRollout?: () => void;
  gather?: Omit<GatherOptions, "afterEach">;
}

/** The rubric for one scenario's group: the task's rubric and the scenario's notes for the judge. */
export function rubricFor(rubric: string | undefined, notes: string): string {
  const r = rubric?.trim() || DEFAULT_RUBRIC;
  return notes ? `${r}\n\n${notes}` : r;
}

const notesOf = (t: TrajectoryLike | undefined) => (typeof t?.metadata.notes === "string" ? t.metadata.notes : "");

/** One training step: `groupsPerStep` groups of `groupSize` conversations, each group scored by the judge. */
export async function customStepGroups(client: OpenAI, step: number, o: CustomStepOptions): Promise<TrajectoryGroup[]> {
  const sampling = { model: o.model, temperature: o.temperature, maxTokens: o.maxTokens };
  return gatherTrajectoryGroups(
    customStepScenarios(step, o.train, o.groupsPerStep).map((scenario) =>
      Array.from({ length: o.groupSize }, () => async () => {
        o.beforeRollout?.();
        return new Trajectory(await rolloutCustom(client, { ...sampling, task: o.task, scenario }));
      }),
    ),
    {
      ...o.gather,
      afterEach: (g) => rulerScoreGroup(g, { ...o.judge, rubric: rubricFor(o.rubric, notesOf(g.trajectories[0])) }),
    },
  );
}

/**
 * Runs `fn` with an engine's adapter off (its base model), as validation needs (a run's engine: `backend.engine(spec)`);
 * the cached KV, computed with the adapter, is dropped before and after. Nothing else may generate on it meanwhile.
 */
export async function withBaseModel<T>(engine: Engine, fn: () => Promise<T>): Promise<T> {
  const lora = engine.model.lora!;
  lora.enabled = false;
  engine.scheduler.invalidateCache();
  try {
    return await fn();
  } finally {
    lora.enabled = true;
    engine.scheduler.invalidateCache();
  }
}

export interface CustomValidation {
  /** Mean judge score of the base model's conversations, and of the checkpoint's. */
  base: number;
  checkpoint: number;
  /** One group per validation scenario: the base model's conversation, then the checkpoint's, judged together. */
  groups: TrajectoryGroup[];
}

/**
 * Scores the checkpoint against the base model on the validation scenarios: for each, one conversation from each
 * (the base model's with the adapter off, through `withBaseModel`), judged side by side by the same judge.
 */
export async function validateCustomTask(
  client: OpenAI,
  o: Omit<CustomStepOptions, "train" | "groupsPerStep" | "groupSize" | "gather"> & {
    val: readonly CustomScenario[];
    /** Runs `fn` with the adapter off (inference only; nothing else may generate meanwhile). */
    withBaseModel: <T>(fn: () => Promise<T>) => Promise<T>;
    /** Seeds scenario i's samples with seed + i, the same for the base model and the checkpoint (default: none). */
    seed?: number;
  },
): Promise<CustomValidation> {
  const sampling = { model: o.model, temperature: o.temperature, maxTokens: o.maxTokens };
  const play = async (scenario: CustomScenario, policy: string, i: number) => {
    o.beforeRollout?.();
    const seed = o.seed === undefined ? undefined : o.seed + i;
    const t = await rolloutCustom(client, {
      ...sampling,
      task: o.task,
      scenario,
      ...(seed === undefined ? {} : { seed }),
    });
    return new Trajectory({ ...t, metadata: { ...t.metadata, policy } });
  };
  const base = await o.withBaseModel(() => Promise.all(o.val.map((s, i) => play(s, "base", i))));
  const mine = await Promise.all(o.val.map((s, i) => play(s, "checkpoint", i)));
  const groups: TrajectoryGroup[] = [];
  for (let i = 0; i < o.val.length; i++) {
    const g = await rulerScoreGroup(new TrajectoryGroup([base[i], mine[i]]), {
      ...o.judge,
      rubric: rubricFor(o.rubric, scenarioNotes(o.val[i])),
    });
    groups.push(g!);
  }
  const mean = (k: number) => groups.reduce((a, g) => a + g.trajectories[k].reward, 0) / Math.max(1, groups.length);
  return { base: mean(0), checkpoint: mean(1), groups };
}

/** The judge could not be used; the message says why and what to check. */
export class JudgeCheckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JudgeCheckError";
  }
}

/**
 * Asks the judge once to score two tiny conversations, as RULER will: throws JudgeCheckError when it does not
 * answer, refuses the json_schema response format, or answers outside the schema.
 */
export async function checkJudge(judge: CustomJudge, opts: { timeoutMs?: number } = {}): Promise<void> {
  const name = typeof judge.model === "string" ? judge.model : judge.model.getInferenceName();
  const where = judge.client ? ` at ${judge.client.baseURL}` : "";
  const convo = (answer: string) => [
    { role: "user" as const, content: "What is 2 + 2?" },
    { role: "assistant" as const, content: answer },
  ];
  try {
    await ruler([convo("4"), convo("5")], { ...judge, maxRetries: 0, timeoutMs: opts.timeoutMs ?? 60_000 });
  } catch (e) {
    if (!(e instanceof RulerError)) throw e;
    const last = e.attempts[e.attempts.length - 1];
    const why = last?.reason ?? e.message;
    if (/^(connection failed|timed out)/.test(why))
      throw new JudgeCheckError(
        `The judge ${name}${where} does not answer (${why}). Check the base URL, that the server is running, and ` +
          `that it accepts requests from this page (CORS).`,
      );
    if (last?.status !== undefined && /response_format|json_schema|schema|structured/i.test(`${why} ${last.reply}`))
      throw new JudgeCheckError(
        `The judge ${name}${where} refused response_format json_schema (structured output), which RULER needs: ${why}. ` +
          `Pick a model or server that supports JSON-schema output.`,
      );
    if (last?.status !== undefined)
      throw new JudgeCheckError(`The judge ${name}${where} refused the request: ${why}. Check the model name and key.`);
    if (followsSchema(last?.reply))
      throw new JudgeCheckError(
        `The judge ${name}${where} answered in RULER's JSON schema, but with scores RULER cannot use (${why}): ` +
          `asked to score two answers to "What is 2 + 2?", it could not. Pick a stronger model as the judge.`,
      );
    throw new JudgeCheckError(
      `The judge ${name}${where} answered, but not in RULER's JSON schema (${why}); it seems not to support ` +
        `response_format json_schema. Pick a model or server that does.`,
    );
  }
}

/** Whether a judge's reply is JSON shaped as RULER's answer (an object with a scores array), whatever its values. */
function followsSchema(reply: string | undefined): boolean {
  try {
    const v = JSON.parse(reply ?? "") as { scores?: unknown };
    return typeof v === "object" && v !== null && Array.isArray(v.scores);
  } catch {
    return false;
  }
}
