// The training loop in the worker: one loaded run at a time (its base model on the GPU with its adapter),
// rollouts of the chosen game through the model's openai client, the reward (game score or RULER), a GRPO
// step, and the step's files in IndexedDB before the next begins. Pause, stop, device loss and a full disk
// all leave the run at its last complete checkpoint, resumable.
import OpenAI from "openai";
import {
  checkJudge,
  customStepGroups,
  gameStepGroups,
  rubricFor,
  validateCustomTask,
  withBaseModel,
  type CustomJudge,
} from "webart";
import {
  DEFAULT_TRAIN_CONFIG,
  getDevice,
  isCpuDevice,
  measureSpeed,
  type ChatMessage,
  type DeviceLostError,
  type SpeedReport,
  type TrajectoryGroup,
} from "webart/engine";
import {
  EMAIL_TOOLS,
  emailScenario,
  emailSystemPrompt,
  GAMES,
  parseOpponents,
  parseStarts,
  rolloutEmail,
  scenarioNotes,
  splitScenarios,
  stepScenarios,
  warmStartConversations,
} from "webart/envs";
import { buildJudgePrompt, type JudgeAttempt } from "webart/ruler";
import type { EmailPlayResult, EngineEvent, FailureKind, ModelChoice, RunState, TrainSettings } from "../api.ts";
import { messageViews } from "../lib/messages.ts";
import { serializeError } from "../errors.ts";
import { Engine, LocalBackend, TrainableModel } from "./internals.ts";
import {
  baseModelOf,
  engineOptions,
  kvSlotsFor,
  loraFor,
  maxContextFor,
  readModelConfig,
  readTokenizer,
} from "./models.ts";
import { appendEnvRow, envRow, stepRow, PROJECT, readMeta, runFiles, writeMeta, type RunMeta } from "./runs.ts";
import { checkRoom, store } from "./store.ts";

let emit: (e: EngineEvent) => void = () => {};
export const setTrainerEvents = (f: (e: EngineEvent) => void) => void (emit = f);

class StopSignal extends Error {
  constructor() {
    super("stopped by the user");
    this.name = "StopSignal";
  }
}

interface Session {
  name: string;
  meta: RunMeta;
  backend: LocalBackend;
  model: TrainableModel;
  lost?: DeviceLostError;
}

let session: Session | null = null;
let busy = false;
/** A base model's speed check in flight (speedOfModel), which loading a run waits for. */
let modelCheck: Promise<SpeedReport> | null = null;
const control = { pause: false, stop: false };

/** Drops the loaded run (its engine is closed; the next use reloads it from its files). */
async function unload(): Promise<void> {
  const s = session;
  session = null;
  await s?.backend.close().catch(() => {});
}

/** The loaded session for a run, loading its base model and latest checkpoint when needed. */
export async function open(name: string): Promise<Session> {
  if (session?.name === name && !session.lost) return session;
  if (busy) throw new Error(`run "${session?.name}" is training; pause it first`);
  return load(name);
}

async function load(name: string): Promise<Session> {
  await modelCheck?.catch(() => {}); // a base model's speed check holds its own engine until it ends
  await unload();
  const meta = await readMeta(name);
  const baseModel = baseModelOf(meta.model);
  const config = await readModelConfig(baseModel);
  emit({ type: "phase", run: name, phase: "loading", step: (await runFiles(name).latestStep()) ?? 0 });
  const backend = new LocalBackend({ store, engine: engineOptions(meta.settings, config) });
  const model = new TrainableModel({ name, project: PROJECT, baseModel, lora: meta.lora, seed: meta.settings.seed });
  await model.register(backend);
  const s: Session = { name, meta, backend, model };
  backend.engine(model.spec).gpu.onLost((e) => {
    s.lost = e;
    // While training, the loop reports it (with the step it paused at); otherwise say it here.
    if (!busy)
      emit({
        type: "notice",
        message: `${e.message}. Nothing saved is lost; the next action reloads the model on a new device.`,
      });
  });
  session = s;
  return s;
}

export async function createRun(name: string, model: ModelChoice, settings: TrainSettings): Promise<void> {
  if (await runFiles(name).readJson("webapp/run.json"))
    throw new Error(`a run named "${name}" exists; pick another name`);
  const lora = loraFor(settings);
  await writeMeta(name, {
    version: 1,
    model,
    settings,
    // A warm start's steps come before the GRPO steps asked for.
    target: settings.steps + (settings.custom?.warmStartEpochs ?? 0),
    lora,
    createdAt: new Date().toISOString(),
  });
}

/** Extends a finished run by its step count, so Resume always trains more. */
export async function extendIfDone(name: string): Promise<void> {
  const meta = await readMeta(name);
  const step = (await runFiles(name).latestStep()) ?? 0;
  if (step >= meta.target) await writeMeta(name, { ...meta, target: step + meta.settings.steps });
}

/** The RULER judge of a run's settings: an endpoint (its key passed in, never stored) or the loaded model. */
function judgeOf(r: TrainSettings["reward"], apiKey: string | undefined, s?: Session): CustomJudge | undefined {
  if (r.kind === "ruler")
    return {
      client: new OpenAI({
        baseURL: r.baseURL,
        apiKey: apiKey || r.apiKey || "none",
        dangerouslyAllowBrowser: true,
        maxRetries: 0,
      }),
      model: r.model,
    };
  // The loaded model answers in the schema through constrained decoding; a bound keeps explanations short.
  if (r.kind === "self" && s)
    return { model: s.model, requestParams: { max_completion_tokens: SELF_JUDGE_TOKENS, temperature: 0 } };
  return undefined;
}

/** The loaded model's limit on its answer as the judge. */
const SELF_JUDGE_TOKENS = 400;
const SELF_JUDGE_ADVICE =
  "Pick “RULER (LLM judge)” with an OpenAI-compatible endpoint, or a base model whose tokenizer packs text into " +
  "fewer tokens.";

/**
 * Whether the loaded model can judge this task at all, from its tokenizer alone (nothing is loaded on the GPU):
 * RULER's prompt for the smallest group a step will send (the first scenario, `groupSize` one-token replies, the
 * rubric and the scenario's notes) and the answer's budget must fit the context the engine gives the model here.
 */
async function selfJudgeProblem(model: ModelChoice, st: TrainSettings): Promise<string | null> {
  const c = st.custom;
  if (!c?.scenarios.length) return null;
  const baseModel = baseModelOf(model);
  const [config, tok] = await Promise.all([readModelConfig(baseModel), readTokenizer(baseModel)]);
  if (!tok.hasChatTemplate) return `${baseModel} has no chat template, so it cannot be prompted as a judge.`;
  const ctx = maxContextFor(config, st.env);
  const first = c.scenarios[0];
  const shared: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: "system", content: c.systemPrompt },
    { role: "user", content: first.prompt },
  ];
  const lists = Array.from({ length: Math.max(2, st.groupSize) }, (_, i) => [
    ...shared,
    { role: "assistant" as const, content: String(i + 1) },
  ]);
  const prompt = buildJudgePrompt(lists, rubricFor(c.rubric, scenarioNotes(first)));
  const tokens = tok.encodeChat(prompt.messages as ChatMessage[], { addGenerationPrompt: true }).length;
  if (tokens + SELF_JUDGE_TOKENS <= ctx) return null;
  return (
    `The loaded model cannot be its own judge for this task: RULER's prompt for a group of ${lists.length} ` +
    `conversations takes ${tokens} tokens of ${baseModel} before the replies are in it, and its answer up to ` +
    `${SELF_JUDGE_TOKENS} more, beyond the ${ctx}-token context the model has here. ${SELF_JUDGE_ADVICE}`
  );
}

/** A RULER failure of the loaded model as its own judge, said as such (other errors are returned as they are). */
function explainSelfJudge(e: unknown, st: TrainSettings | undefined): unknown {
  const attempts = (e as { attempts?: JudgeAttempt[] })?.attempts;
  if (st?.reward.kind !== "self" || (e as Error)?.name !== "RulerError" || !attempts?.length) return e;
  const last = attempts[attempts.length - 1];
  const why = /context_length_exceeded|maximum context length/.test(`${last.reason} ${last.reply ?? ""}`)
    ? `RULER's prompt for a group is longer than the model's context (${last.reason})`
    : `it gave no answer in RULER's JSON schema (${last.reason})`;
  return new Error(`The loaded model could not judge as RULER: ${why}. ${SELF_JUDGE_ADVICE}`, { cause: e });
}

/**
 * Whether the model can play the email agent at all, from its config and tokenizer alone (nothing is loaded on the
 * GPU): the first turn of the run's first scenario (the system prompt, the three tools and the question, as the
 * chat template renders them) and a reply of the run's budget must fit the context the engine gives the model here.
 * Later turns that outgrow it end their episode unanswered, as in Node.
 */
async function emailContextProblem(model: ModelChoice, st: TrainSettings): Promise<string | null> {
  const baseModel = baseModelOf(model);
  const [config, tok] = await Promise.all([readModelConfig(baseModel), readTokenizer(baseModel)]);
  if (!tok.hasChatTemplate) return `${baseModel} has no chat template, so it cannot be offered the email tools.`;
  const ctx = maxContextFor(config, "email");
  const [[first]] = stepScenarios(0, { seed: st.seed, groupsPerStep: 1, groupSize: 1 });
  const s = emailScenario("train", first.seed);
  const messages: ChatMessage[] = [
    { role: "system", content: emailSystemPrompt(s) },
    { role: "user", content: s.question.text },
  ];
  const tokens = tok.encodeChat(messages, { tools: EMAIL_TOOLS, addGenerationPrompt: true }).length;
  if (tokens + st.maxTokens <= ctx) return null;
  return (
    `${baseModel} cannot play the email agent here: its first turn (the system prompt, the three tools and the ` +
    `question) takes ${tokens} tokens and a reply up to ${st.maxTokens} more, beyond the ${ctx}-token context the ` +
    `model has here. Pick a model with a longer context whose tokenizer packs JSON into few tokens (e.g. a Qwen2.5 ` +
    `or Qwen3 instruct model).`
  );
}

/**
 * Before a run starts: for the email agent, checks that the model's context holds its first turn; for a custom
 * task, asks its judge endpoint once, or checks that the loaded model can hold RULER's prompt. Resolves with why
 * the run cannot start, or null.
 */
export async function checkRun(settings: TrainSettings, model: ModelChoice): Promise<string | null> {
  if (settings.env === "email") return emailContextProblem(model, settings).catch((e) => (e as Error).message);
  if (settings.env !== "custom") return null;
  if (settings.reward.kind === "self") return selfJudgeProblem(model, settings).catch((e) => (e as Error).message);
  const judge = judgeOf(settings.reward, undefined);
  if (!judge) return null;
  try {
    await checkJudge(judge, { timeoutMs: 30_000 });
    return null;
  } catch (e) {
    return (e as Error).message;
  }
}

/** A custom task's validation at `step`: base model against the checkpoint, saved under the "val" split. */
async function validate(s: Session, step: number, apiKey: string | undefined): Promise<Record<string, number>> {
  const st = s.meta.settings;
  const c = st.custom!;
  const { val } = splitScenarios(c.scenarios, { seed: st.seed });
  emit({ type: "phase", run: s.name, phase: "validating", step });
  const v = await validateCustomTask(s.model.openaiClient(), {
    task: { systemPrompt: c.systemPrompt, turns: c.turns, userPrompt: c.userPrompt },
    val,
    model: s.name,
    temperature: st.temperature,
    maxTokens: st.maxTokens,
    judge: judgeOf(st.reward, apiKey, s)!,
    rubric: c.rubric,
    withBaseModel: (fn) => withBaseModel(s.backend.engine(s.model.spec), fn),
    seed: st.seed, // each validation replays the same draws, as webart train's
    beforeRollout: () => {
      if (control.stop) throw new StopSignal();
    },
  });
  await s.model.log(v.groups, { split: "val", step, metrics: { base_score: v.base, checkpoint_score: v.checkpoint } });
  return { valBase: v.base, valModel: v.checkpoint };
}

async function rollouts(s: Session, step: number, apiKey: string | undefined): Promise<TrajectoryGroup[]> {
  const st = s.meta.settings;
  const judge = judgeOf(st.reward, apiKey, s);
  const total = st.groupSize * st.groupsPerStep;
  emit({ type: "phase", run: s.name, phase: "rollouts", step, done: 0, total });
  const beforeRollout = () => {
    if (control.stop) throw new StopSignal();
  };
  const gather = {
    concurrency: kvSlotsFor(st),
    progressBar: "off" as const,
    onProgress: (p: { done: number; total: number }) =>
      emit({ type: "phase", run: s.name, phase: "rollouts", step, done: p.done, total: p.total }),
  };
  const c = st.custom;
  if (st.env === "custom") {
    if (!c) throw new Error(`run "${s.name}": a custom task without its scenarios in webapp/run.json`);
    return customStepGroups(s.model.openaiClient(), step, {
      task: { systemPrompt: c.systemPrompt, turns: c.turns, userPrompt: c.userPrompt },
      train: splitScenarios(c.scenarios, { seed: st.seed }).train,
      groupsPerStep: st.groupsPerStep,
      groupSize: st.groupSize,
      model: s.name,
      temperature: st.temperature,
      maxTokens: st.maxTokens,
      judge: judge!,
      rubric: c.rubric,
      beforeRollout,
      gather,
    });
  }
  return gameStepGroups(s.model.openaiClient(), step, {
    game: st.env,
    seed: st.seed,
    groupsPerStep: st.groupsPerStep,
    maxGroups: st.maxGroups,
    groupSize: st.groupSize,
    opponents: parseOpponents(st.opponents ?? "random"),
    starts: parseStarts(st.starts ?? "empty"),
    decisionReward: st.decisionReward ?? 0,
    explore: st.explore ?? 0,
    legalMoves: st.legalMoves ?? false,
    ...(st.toolChoice ? { toolChoice: st.toolChoice } : {}),
    model: s.name,
    temperature: st.temperature,
    maxTokens: st.maxTokens,
    judge:
      judge && "client" in judge && judge.client ? { client: judge.client, model: String(judge.model) } : undefined,
    beforeRollout,
    gather,
  });
}

async function classify(e: unknown, s: Session | null): Promise<FailureKind> {
  const err = e as Error;
  if (s && !s.lost && err?.name !== "DeviceLostError") {
    // After a loss, the first failure is often a validation error on a destroyed buffer, reported before the
    // device's lost promise settles: give it a moment to say so.
    const gpu = s.backend.engine(s.model.spec).gpu;
    await Promise.race([gpu.lost, new Promise((r) => setTimeout(r, 1000))]);
    if (gpu.lostError) s.lost = gpu.lostError;
  }
  if (s?.lost || err?.name === "DeviceLostError") return "device-lost";
  if (err?.name === "StorageFullError") return "storage-full";
  if (/WebGPU/.test(err?.message ?? "") && /navigator\.gpu|no adapter/.test(err?.message ?? ""))
    return "webgpu-missing";
  return "other";
}

/** Trains the run up to its target; resolves with the state it ends in (also emitted). */
export async function trainLoop(name: string, apiKey?: string): Promise<RunState> {
  if (busy) throw new Error(`run "${session?.name}" is already training`);
  busy = true;
  control.pause = control.stop = false;
  let s: Session | null = null;
  let step =
    (await runFiles(name)
      .latestStep()
      .catch(() => null)) ?? 0;
  const end = (state: RunState, extra: { failure?: FailureKind; error?: unknown } = {}): RunState => {
    emit({
      type: "state",
      run: name,
      state,
      step,
      failure: extra.failure,
      error: extra.error ? serializeError(extra.error) : undefined,
    });
    return state;
  };
  try {
    s = session?.name === name && !session.lost ? session : await load(name);
    step = await s.model.getStep();
    const meta = await readMeta(name);
    s.meta = meta;
    emit({ type: "state", run: name, state: "running", step });
    const times: number[] = [];
    const lora = s.backend.engine(s.model.spec).model.lora!;
    store.onCommit = () => emit({ type: "phase", run: name, phase: "saving", step: step + 1 });
    // A custom task's warm start: supervised epochs on the training scenarios' reference answers, a step each,
    // before the first GRPO step (a run paused during it goes on with the epochs left).
    const c = meta.settings.custom;
    const warm = Math.min(c?.warmStartEpochs ?? 0, meta.target);
    const conversations =
      c && step < warm
        ? warmStartConversations(c, splitScenarios(c.scenarios, { seed: meta.settings.seed }).train)
        : [];
    while (step < warm) {
      if (control.stop) return end("stopped");
      if (control.pause) return end("paused");
      await checkRoom(lora.size * 4 * 3 + (1 << 20));
      emit({ type: "phase", run: name, phase: "training", step: step + 1 });
      const res = await s.model.trainSft(
        conversations.map((m) => ({ messagesAndChoices: m })),
        { learningRate: meta.settings.learningRate },
      );
      step = res.step;
      emit({
        type: "notice",
        message: `Warm start ${step}/${warm}: supervised loss ${res.metrics.loss.toFixed(3)} on ${conversations.length} reference answers.`,
      });
    }
    while (step < meta.target) {
      if (control.stop) return end("stopped");
      if (control.pause) return end("paused");
      // A checkpoint holds the adapter and two optimizer moments; trajectories are small beside it.
      await checkRoom(lora.size * 4 * 3 + (1 << 20));
      const t0 = performance.now();
      const groups = await rollouts(s, step, apiKey);
      if (control.stop) return end("stopped");
      emit({ type: "phase", run: name, phase: "training", step: step + 1 });
      const beta = meta.settings.beta ?? 0;
      // The turns a run never samples (a decision start's opening) drift unless the KL term holds them too.
      const res = await s.model.train(groups, {
        learningRate: meta.settings.learningRate,
        // The env's recipe (the email env trains on r - mean); custom tasks take ART's default.
        ...(meta.settings.env !== "custom"
          ? { scaleRewards: GAMES[meta.settings.env].train.scaleRewards ?? true }
          : {}),
        beta,
        anchorContextTurns: beta > 0,
      });
      const env = envRow(res.step, groups);
      step = res.step;
      if (c && (step % c.valEvery === 0 || step >= meta.target)) Object.assign(env, await validate(s, step, apiKey));
      await appendEnvRow(name, env);
      times.push((performance.now() - t0) / 1000);
      const avg = times.slice(-5).reduce((a, b) => a + b, 0) / Math.min(5, times.length);
      const h: Record<string, unknown> = { step };
      for (const [k, v] of Object.entries(res.metrics)) h[`train/${k}`] = v;
      const row = stepRow(h, env);
      emit({ type: "step", run: name, row, target: meta.target, etaSeconds: avg * (meta.target - step) });
      if (res.metrics.skipped) {
        emit({
          type: "notice",
          message: `Step ${step}: every game in a group scored the same, so there was nothing to learn from; the step advanced without an update.`,
        });
      }
    }
    return end("done");
  } catch (caught) {
    if (caught instanceof StopSignal || control.stop) return end("stopped");
    const e = explainSelfJudge(caught, s?.meta.settings);
    const failure = await classify(e, s);
    // The engine's in-memory step may be ahead of what was saved; reload from the files next time.
    await unload();
    step =
      (await runFiles(name)
        .latestStep()
        .catch(() => null)) ?? step;
    return end(failure === "other" || failure === "webgpu-missing" ? "failed" : "paused", {
      failure,
      error: failure === "device-lost" ? (s?.lost ?? e) : e,
    });
  } finally {
    store.onCommit = () => {};
    busy = false;
  }
}

export const requestPause = () => void (control.pause = true);
export const requestStop = () => void (control.stop = true);
export const isBusy = () => busy;

/** The run's session for the Play tab (loading it when it is not the one in memory); the base model (adapter off)
 *  only while nothing trains. */
async function openToAsk(name: string, opts: { base?: boolean }): Promise<Session> {
  if (opts.base && busy)
    throw new Error("a run is training; pause it to ask the base model (its adapter cannot be switched off meanwhile)");
  return open(name);
}

/** The model's reply with the run's latest adapter (loads the run when it is not the one in memory). */
export async function reply(
  name: string,
  messages: OpenAI.Chat.ChatCompletionMessageParam[],
  maxTokens: number,
  opts: { base?: boolean } = {},
): Promise<string> {
  const s = await openToAsk(name, opts);
  const ask = async () =>
    (
      await s.model.openaiClient().chat.completions.create({
        model: s.name,
        messages,
        max_completion_tokens: maxTokens,
        temperature: s.meta.settings.temperature,
      })
    ).choices[0]?.message.content ?? "";
  return opts.base ? withBaseModel(s.backend.engine(s.model.spec), ask) : ask();
}

/**
 * The Play tab's email episode: the run's latest checkpoint (or, with `base`, the base model) answers `question`
 * about held-out inbox `index` with the tools, as a training rollout plays (the run's temperature and reply budget).
 * Graded when the question is the inbox's own; a person's own question has no known answer.
 */
export async function askEmail(
  name: string,
  index: number,
  question: string,
  opts: { base?: boolean } = {},
): Promise<EmailPlayResult> {
  const s = await openToAsk(name, opts);
  const scenario = emailScenario("eval", index);
  const text = question.trim();
  if (!text) throw new Error("ask a question about the inbox");
  const own = text === scenario.question.text;
  const play = () =>
    rolloutEmail(s.model.openaiClient(), {
      scenario: own ? scenario : { ...scenario, question: { ...scenario.question, text } },
      model: s.name,
      temperature: s.meta.settings.temperature,
      maxTokens: s.meta.settings.maxTokens,
      toolChoice: s.meta.settings.toolChoice ?? "auto",
    });
  const t = await (opts.base ? withBaseModel(s.backend.engine(s.model.spec), play) : play());
  const m = t.metrics as Record<string, number | boolean>;
  const ending = m.answered ? null : (t.logs.find((l) => !l.startsWith("answer ")) ?? "no answer");
  return {
    messages: messageViews(t.messagesAndChoices),
    graded: own ? { correct: !!m.correct, rightMessage: !!m.rightMessage, reward: t.reward } : null,
    turns: Number(m.turns),
    ending,
  };
}

/** How fast the run's model (with its latest adapter) runs on this GPU: measureSpeed on the run's engine, between
 *  requests. Not while a run trains (it would time the two together); short timings on a CPU device. */
export async function speed(name: string): Promise<SpeedReport> {
  if (busy) throw new Error(`run "${session?.name}" is training; pause it to measure speed`);
  const s = await open(name);
  const engine = s.backend.engine(s.model.spec);
  const base = baseModelOf(s.meta.model).split("/").pop();
  return measureSpeed(engine, { quick: isCpuDevice(engine.gpu), name: base });
}

/** How fast a base model, before any run, would run and train here: the model loaded as a run with these settings
 *  would load it (its sizes, budget and LoRA; training planned), a fresh adapter attached, then measureSpeed with a
 *  GRPO step of 8 x 512 tokens (2 x 64 on a CPU device). The open run, if any, is unloaded first (its memory is
 *  the device's again; its next use reloads it from its files), and the engine closes when the check ends. */
export async function speedOfModel(model: ModelChoice, settings: TrainSettings): Promise<SpeedReport> {
  if (busy) throw new Error(`run "${session?.name}" is training; pause it to measure speed`);
  if (modelCheck) throw new Error("a speed check is running; wait for it to end");
  const check = (modelCheck = checkModel(model, settings));
  try {
    return await check;
  } finally {
    modelCheck = null;
  }
}

async function checkModel(model: ModelChoice, settings: TrainSettings): Promise<SpeedReport> {
  await unload();
  const baseModel = baseModelOf(model);
  const config = await readModelConfig(baseModel);
  const lora = loraFor(settings);
  const engine = await Engine.load(baseModel, {
    ...engineOptions(settings, config),
    name: baseModel.split("/").pop(),
    train: {
      lora: { rank: lora.rank, targets: lora.targets },
      microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens,
    },
  });
  try {
    engine.attachLora(lora, settings.seed);
    const quick = isCpuDevice(engine.gpu);
    const train = quick ? { batch: 2, length: 64 } : { batch: 8, length: 512 };
    return await measureSpeed(engine, { quick, train, name: baseModel.split("/").pop() });
  } finally {
    await engine.close();
  }
}

export async function forget(name: string): Promise<void> {
  if (session?.name === name) {
    if (busy) throw new Error(`run "${name}" is training; stop it before deleting`);
    await unload();
  }
}

export async function loseDevice(): Promise<void> {
  const gpu = session ? session.backend.engine(session.model.spec).gpu : await getDevice();
  gpu.device.destroy();
}
