// @webart/ruler: RULER, relative rewards for a group of trajectories from an LLM judge behind any
// OpenAI-compatible endpoint.
export { ruler, redact, RulerError, type RulerOptions, type JudgeAttempt, type JudgeModel } from "./ruler.ts";
export { rulerScoreGroup, type RulerGroupOptions } from "./group.ts";
export {
  DEFAULT_RUBRIC,
  buildJudgePrompt,
  commonPrefixLength,
  scoresResponseFormat,
  type JudgePrompt,
} from "./prompt.ts";
export { extractJsonObject, parseScores, RefusedReply, type TrajectoryScore } from "./reply.ts";
