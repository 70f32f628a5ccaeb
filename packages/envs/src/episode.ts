// The turn loop shared by rollouts, evaluation and transcript generation, so all three present a game to the
// player with exactly the same messages; and the conversion of the turns into a trajectory.
import type { Choice, History, Message, Metadata, Metrics, MessagesAndChoices, TrajectoryLike } from "./types.ts";

/** A text game: what the player is told, what it sees each turn, and how a reply changes the game. */
export interface Env<G> {
  name: string;
  system(game: G): string;
  /** The user message of a turn (the board). */
  observe(game: G): string;
  step(game: G, reply: string): void;
  done(game: G): boolean;
  /** Turns played before the player's first (a scripted opening): shown in its prompts as earlier turns. */
  prelude?(game: G): { observation: string; reply: string }[];
  reward(game: G): number;
  metrics(game: G): Metrics;
  /** The final state, for the trajectory's logs. */
  describe(game: G): string;
}

export interface Turn {
  /** Exactly the messages the player was given. */
  prompt: Message[];
  reply: string;
  /** The sampled choice, when the reply came from a chat completion. */
  choice?: Choice;
}

export type Act<G> = (game: G, prompt: Message[]) => Promise<{ text: string; choice?: Choice }>;

/**
 * Plays one game to the end. Each prompt is the system message, the last `historyTurns` (board, reply) pairs
 * and the current board; Infinity keeps the whole game.
 */
export async function playEpisode<G>(env: Env<G>, game: G, act: Act<G>, historyTurns = Infinity): Promise<Turn[]> {
  const system: Message = { role: "system", content: env.system(game) };
  const turns: Turn[] = [];
  const prompt = (observation: string): Message[] => {
    const past = turns.slice(Math.max(0, turns.length - historyTurns));
    return [
      system,
      ...past.flatMap((t) => [t.prompt[t.prompt.length - 1], assistant(t.reply)]),
      { role: "user", content: observation },
    ];
  };
  // A prelude's replies have no Choice: they are context, never trained.
  for (const t of env.prelude?.(game) ?? []) turns.push({ prompt: prompt(t.observation), reply: t.reply });
  while (!env.done(game)) {
    const p = prompt(env.observe(game));
    const { text, choice } = await act(game, p);
    turns.push({ prompt: p, reply: text, choice });
    env.step(game, text);
  }
  return turns;
}

/**
 * The trajectory of a finished game. When every prompt held the whole game so far, that is one conversation
 * with a `Choice` per turn; otherwise each turn is its own history (its prompt plus its choice): the first is
 * `messagesAndChoices` and the rest go to `additionalHistories`, all sharing the game's reward.
 */
export function toTrajectory<G>(env: Env<G>, game: G, turns: Turn[], metadata: Metadata): TrajectoryLike {
  const replyOf = (t: Turn): Message | Choice => t.choice ?? assistant(t.reply);
  let histories: MessagesAndChoices[];
  const last = turns[turns.length - 1];
  if (!last) histories = [[{ role: "system", content: env.system(game) }]];
  else if (last.prompt.length === 2 * turns.length) {
    // The last prompt is system + every earlier (board, reply) + the current board: one conversation.
    histories = [[last.prompt[0], ...turns.flatMap((t) => [t.prompt[t.prompt.length - 1], replyOf(t)])]];
  } else histories = turns.map((t) => [...t.prompt, replyOf(t)]);
  const trajectory: TrajectoryLike = {
    messagesAndChoices: histories[0],
    reward: env.reward(game),
    metrics: env.metrics(game),
    metadata: { game: env.name, ...metadata },
    logs: [env.describe(game)],
  };
  if (histories.length > 1)
    trajectory.additionalHistories = histories.slice(1).map((h): History => ({ messagesAndChoices: h }));
  return trajectory;
}

function assistant(content: string): Message {
  return { role: "assistant", content };
}
