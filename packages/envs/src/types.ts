// Structural types shared by the environments: chat messages, the OpenAI `Choice`, and the trajectory
// shape the engine's `Trajectory` class will have (same field names, so either can be passed around).
import type OpenAI from "openai";

export type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;
export type Choice = OpenAI.Chat.Completions.ChatCompletion.Choice;
export type Tool = OpenAI.Chat.Completions.ChatCompletionTool;

/** A conversation as ART stores it: plain messages, and the sampled `Choice`s (only those are trained). */
export type MessagesAndChoices = (Message | Choice)[];

/** One more conversation belonging to a trajectory (same reward), e.g. one per move in 2048. */
export interface History {
  messagesAndChoices: MessagesAndChoices;
  tools?: Tool[];
}

export type Metrics = Record<string, number | boolean>;
export type Metadata = Record<string, string | number | boolean | null>;

/** The fields of ART's Trajectory; the engine's `Trajectory` class satisfies this. */
export interface TrajectoryLike {
  messagesAndChoices: MessagesAndChoices;
  reward: number;
  metrics: Metrics;
  metadata: Metadata;
  logs: string[];
  tools?: Tool[];
  additionalHistories?: History[];
}

/**
 * A player: from the game state and the conversation so far (system, boards, its own earlier replies,
 * ending with the current board) to its reply text, e.g. "<move>B2</move>".
 */
export type Player<G> = (game: G, conversation: Message[]) => Promise<string>;

/** Sampling settings passed to `client.chat.completions.create`. */
export interface SamplingOptions {
  model: string;
  /** Sampling temperature; the server's default when omitted. */
  temperature?: number;
  /** Sent as `max_completion_tokens`. */
  maxTokens?: number;
  /** Replays a game's samples: each turn's request carries a seed derived from this and the turn's number. The
   * server draws a fresh seed per request when omitted (training wants the games of a group to differ). */
  seed?: number;
  /**
   * Tool-using envs (email): "required" makes every turn a tool call, on servers that can force one (webart's
   * constrains the sampled tokens to a call that fits a tool's schema); default "auto", the model's choice.
   * "guided" is "required" with each call's values limited to what the episode has shown the agent (webart's
   * `guided_tools`: the email env's search words from the question, ids from the results, answers from the text
   * read); the prompt shows the same tools either way.
   */
  toolChoice?: "auto" | "required" | "guided";
}

/** True when an entry of `messagesAndChoices` is a sampled `Choice` rather than a plain message. */
export function isChoice(m: Message | Choice): m is Choice {
  return "message" in m && "finish_reason" in m;
}
