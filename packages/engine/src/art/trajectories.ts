// Trajectory and TrajectoryGroup, as in OpenPipe ART: a rollout's conversation (plain messages and
// the sampler's Choices), its reward, metrics and logs; a group of rollouts for the same scenario.
import type { ChatCompletion, ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { Rng } from "@webart/gpu";
import type { TokenAllowed } from "./allowed.ts";

/** A Choice as webart's engine returns it: the OpenAI fields plus the sampled token ids and their logprobs. */
export type SampledChoice = ChatCompletion.Choice & {
  /** Token ids the sampler produced for this turn (webart extension; required to train on it). */
  token_ids?: number[];
  /** The sampler's logprob of each token in token_ids (webart extension). */
  token_logprobs?: number[];
  /**
   * The reply was forced (a guided_choice of one string, e.g. an exploration move), not sampled (webart extension).
   * Its tokens and logprobs are still the model's. The policy loss trains them when the trajectory's advantage is
   * positive (a better move than the policy's, found by forcing it) and not when it is negative (pushing down a token
   * the policy rarely picks only sharpens it toward its current pick); the KL term leaves them out, since its
   * estimate assumes tokens sampled from the policy.
   */
  forced?: boolean;
  /**
   * The sets a constrained sampler drew the tokens from (tool_choice "required" or a named tool, a JSON
   * response_format, a guided_choice of several strings; webart extension). token_logprobs stay the whole
   * vocabulary's; training takes each token's logprob over its set, the distribution it was drawn from.
   */
  token_allowed?: TokenAllowed;
};

export type MessageOrChoice = ChatCompletionMessageParam | SampledChoice;
export type Message = ChatCompletionMessageParam;
export type Tool = ChatCompletionTool;

export interface History {
  messagesAndChoices: MessageOrChoice[];
  tools?: Tool[];
}

export type Scalar = string | number | boolean | null;

export function isChoice(m: MessageOrChoice): m is SampledChoice {
  return typeof m === "object" && m !== null && "message" in m && "finish_reason" in m;
}

/** True when a Choice carries what training needs: the exact sampled ids and their logprobs. */
export function isTrainableChoice(m: MessageOrChoice): boolean {
  return (
    isChoice(m) &&
    Array.isArray(m.token_ids) &&
    Array.isArray(m.token_logprobs) &&
    m.token_ids.length > 0 &&
    m.token_ids.length === m.token_logprobs.length
  );
}

/** The assistant message a Choice stands for (null content becomes ""). */
export function choiceToMessage(c: SampledChoice): Message {
  const msg: Message = { role: "assistant", content: c.message.content ?? "" };
  if (c.message.tool_calls?.length) (msg as { tool_calls?: unknown }).tool_calls = c.message.tool_calls;
  return msg;
}

export interface TrajectoryInit {
  messagesAndChoices?: MessageOrChoice[];
  reward?: number;
  metrics?: Record<string, number | boolean>;
  metadata?: Record<string, Scalar>;
  logs?: string[];
  tools?: Tool[];
  additionalHistories?: History[];
}

export class Trajectory {
  messagesAndChoices: MessageOrChoice[];
  /** NaN until set (ART requires it): training refuses a trajectory without one rather than reading 0. */
  reward: number;
  metrics: Record<string, number | boolean>;
  metadata: Record<string, Scalar>;
  logs: string[];
  tools?: Tool[];
  additionalHistories: History[];
  readonly startTime = Date.now();

  constructor(init: TrajectoryInit = {}) {
    this.messagesAndChoices = init.messagesAndChoices ?? [];
    this.reward = init.reward ?? NaN;
    this.metrics = init.metrics ?? {};
    this.metadata = init.metadata ?? {};
    this.logs = init.logs ?? [];
    this.tools = init.tools;
    this.additionalHistories = init.additionalHistories ?? [];
  }

  /** The conversation as plain messages (each Choice as its assistant message). */
  messages(): Message[] {
    return this.messagesAndChoices.map((m) => (isChoice(m) ? choiceToMessage(m) : m));
  }

  log(line: string): void {
    this.logs.push(line);
  }

  /** Records the rollout's duration in seconds as a metric. */
  finish(): this {
    this.metrics.duration = (Date.now() - this.startTime) / 1000;
    return this;
  }

  /** Every history that carries trainable turns: the main one, then additionalHistories. */
  histories(): History[] {
    return [{ messagesAndChoices: this.messagesAndChoices, tools: this.tools }, ...this.additionalHistories];
  }

  hasTrainableTurns(): boolean {
    return this.histories().some((h) => h.messagesAndChoices.some(isTrainableChoice));
  }

  /** ART's on-disk JSON shape (snake_case), so runs can continue in ART/TRL. */
  toJSON(): Record<string, unknown> {
    const mc = (list: MessageOrChoice[]) =>
      list.map((m) => (isChoice(m) ? { ...m, trainable: isTrainableChoice(m) } : m));
    return {
      messages_and_choices: mc(this.messagesAndChoices),
      tools: this.tools ?? null,
      additional_histories: this.additionalHistories.map((h) => ({
        messages_and_choices: mc(h.messagesAndChoices),
        tools: h.tools ?? null,
      })),
      reward: this.reward,
      metrics: this.metrics,
      metadata: this.metadata,
      logs: this.logs,
    };
  }

  static fromJSON(j: Record<string, unknown>): Trajectory {
    const strip = (list: unknown): MessageOrChoice[] =>
      ((list as Record<string, unknown>[]) ?? []).map((m) => {
        const { trainable: _t, ...rest } = m;
        return rest as unknown as MessageOrChoice;
      });
    return new Trajectory({
      messagesAndChoices: strip(j.messages_and_choices),
      tools: (j.tools as Tool[] | null) ?? undefined,
      additionalHistories: ((j.additional_histories as Record<string, unknown>[]) ?? []).map((h) => ({
        messagesAndChoices: strip(h.messages_and_choices),
        tools: (h.tools as Tool[] | null) ?? undefined,
      })),
      reward: j.reward as number,
      metrics: (j.metrics as Record<string, number>) ?? {},
      metadata: (j.metadata as Record<string, Scalar>) ?? {},
      logs: (j.logs as string[]) ?? [],
    });
  }
}

export interface CapturedException {
  type: string;
  message: string;
  traceback: string;
}

export function captureException(e: unknown): CapturedException {
  if (e instanceof Error) return { type: e.name, message: e.message, traceback: e.stack ?? "" };
  return { type: typeof e, message: String(e), traceback: "" };
}

export type TrajectoryLike = Trajectory | TrajectoryInit;

function asTrajectory(t: TrajectoryLike): Trajectory {
  return t instanceof Trajectory ? t : new Trajectory(t);
}

/** A group of trajectories for the same scenario; rewards are compared within it. */
export class TrajectoryGroup {
  trajectories: Trajectory[];
  exceptions: CapturedException[];

  constructor(trajectories: TrajectoryLike[] = [], exceptions: CapturedException[] = []) {
    this.trajectories = trajectories.map(asTrajectory);
    this.exceptions = exceptions;
  }

  /**
   * Runs rollouts (promises or thunks) and collects the results; a rollout that throws is captured
   * into `exceptions` instead of failing the group. Thunks let gatherTrajectoryGroups bound concurrency.
   */
  static async from(
    rollouts: (Promise<TrajectoryLike> | (() => Promise<TrajectoryLike>))[],
    onEach?: (t: Trajectory | null, e?: CapturedException) => void,
  ): Promise<TrajectoryGroup> {
    const group = new TrajectoryGroup();
    const results = await Promise.all(
      rollouts.map(async (r) => {
        try {
          const t = asTrajectory(await (typeof r === "function" ? r() : r));
          onEach?.(t);
          return { t };
        } catch (err) {
          const e = captureException(err);
          onEach?.(null, e);
          return { e };
        }
      }),
    );
    for (const r of results) {
      if (r.t) group.trajectories.push(r.t);
      else if (r.e) group.exceptions.push(r.e);
    }
    return group;
  }

  rewards(): number[] {
    return this.trajectories.map((t) => t.reward);
  }

  toJSON(): Record<string, unknown> {
    return { trajectories: this.trajectories.map((t) => t.toJSON()), exceptions: this.exceptions };
  }

  static fromJSON(j: Record<string, unknown>): TrajectoryGroup {
    return new TrajectoryGroup(
      ((j.trajectories as Record<string, unknown>[]) ?? []).map((t) => Trajectory.fromJSON(t)),
      (j.exceptions as CapturedException[]) ?? [],
    );
  }
}

/** Every trajectory needs a finite reward before train (or log): each backend checks, naming the first without. */
export function checkRewards(groups: TrajectoryGroup[], op: "train" | "log"): void {
  groups.forEach((g, gi) =>
    g.trajectories.forEach((t, ti) => {
      if (Number.isFinite(t.reward)) return;
      const has = Number.isNaN(t.reward) ? "has no reward" : `has reward ${t.reward}, not a finite number`;
      throw new Error(
        `${op}: trajectory ${ti} of group ${gi} ${has}: set trajectory.reward before ${op === "train" ? "training" : "logging"}`,
      );
    }),
  );
}

/**
 * At most `max` of a trajectory's histories (0: all), in their order: the last one (it holds the reply that ended
 * the episode) and a seeded uniform sample of the others.
 */
export function sampleHistories(hs: History[], max: number, seed: number): History[] {
  if (max <= 0 || hs.length <= max) return hs;
  const rest = hs.slice(0, -1).map((_, i) => i);
  const rng = new Rng(seed);
  for (let i = rest.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [rest[i], rest[j]] = [rest[j], rest[i]];
  }
  const keep = rest.slice(0, max - 1).sort((a, b) => a - b);
  return [...keep.map((i) => hs[i]), hs[hs.length - 1]];
}
