// Scoring an email episode and summarizing many. Reward: 1 for the right email and a right answer, 0.5 for the
// right email with a wrong answer, 0 otherwise (no answer included); minus TURN_PENALTY per model turn beyond
// MIN_TURNS (search, read, answer); -1 for a malformed reply, which ends the episode (no turn penalty on top).
import type { TrajectoryLike } from "../types.ts";

export const EMAIL_REWARD = {
  /** search, read, answer. */
  minTurns: 3,
  /** Per model turn beyond minTurns: a small push toward direct searches. */
  turnPenalty: 0.02,
  /** The right email with a wrong answer. */
  partial: 0.5,
  /** A reply with no tool call, an unknown tool, or arguments that cannot be used. */
  malformed: -1,
  /** An answer longer than this (in words) is wrong however much it contains, so pasting an email scores 0.5. */
  maxAnswerWords: 20,
};

/** Lower case, punctuation as spaces, whitespace collapsed: "$240." and " 240 " compare equal. */
export function normalizeAnswer(s: string): string {
  return s
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, " ")
    .trim();
}

/** The answer contains the expected one as whole words (after normalizing) and is at most maxAnswerWords long. */
export function answerMatches(answer: string, expected: string): boolean {
  const a = normalizeAnswer(answer);
  const e = normalizeAnswer(expected);
  if (!e || !a || a.split(" ").length > EMAIL_REWARD.maxAnswerWords) return false;
  return ` ${a} `.includes(` ${e} `);
}

export interface EmailOutcome {
  /** Model turns taken (chat completions). */
  turns: number;
  malformed: boolean;
  /** return_final_answer was called. */
  answered: boolean;
  rightMessage: boolean;
  correct: boolean;
}

export function emailReward(o: EmailOutcome): number {
  if (o.malformed) return EMAIL_REWARD.malformed;
  const base = o.correct && o.rightMessage ? 1 : o.rightMessage ? EMAIL_REWARD.partial : 0;
  return base - EMAIL_REWARD.turnPenalty * Math.max(0, o.turns - EMAIL_REWARD.minTurns);
}

export interface EmailEvaluation {
  episodes: number;
  /** The right email and a right answer. */
  accuracy: number;
  rightMessage: number;
  answered: number;
  /** Episodes that ended on a malformed reply. */
  malformed: number;
  /** Well-formed tool calls over all the model's turns (each malformed episode ends on its one malformed reply). */
  wellFormedCalls: number;
  /** Episodes that ended because the conversation outgrew the model's context. */
  contextFull: number;
  meanTurns: number;
  meanReward: number;
}

export function summarizeEmail(trajectories: TrajectoryLike[]): EmailEvaluation {
  const n = trajectories.length;
  const mean = (f: (t: TrajectoryLike) => number) => (n ? trajectories.reduce((s, t) => s + f(t), 0) / n : 0);
  const meanTurns = mean((t) => Number(t.metrics.turns));
  const malformed = mean((t) => Number(t.metrics.malformed));
  return {
    episodes: n,
    accuracy: mean((t) => Number(t.metrics.correct)),
    rightMessage: mean((t) => Number(t.metrics.rightMessage)),
    answered: mean((t) => Number(t.metrics.answered)),
    malformed,
    wellFormedCalls: meanTurns ? 1 - malformed / meanTurns : 0,
    contextFull: mean((t) => Number(t.metrics.contextFull ?? 0)),
    meanTurns,
    meanReward: mean((t) => t.reward),
  };
}
