// Rollouts through the real `openai` SDK against a scripted /chat/completions server (custom fetch):
// trajectory structure, exactly what was sent, rewards, bounded 2048 context, and errors.
import { describe, expect, it } from "vitest";
import { rollout2048, rolloutTicTacToe, chatPlayer } from "./rollout.ts";
import { scriptedOpenAI } from "./scripted.ts";
import { evaluateTicTacToe } from "./evaluate.ts";
import { legalMoves, type Direction } from "./game2048.ts";
import { ticTacToeSystemPrompt } from "./tictactoe.ts";
import { isChoice, type Message, type MessagesAndChoices } from "./types.ts";

const lastUser = (messages: Message[]) => String(messages[messages.length - 1].content);

/** Reads the board as a person would from the rendered text and takes the first empty cell. */
function firstEmptyCell(messages: Message[]): string {
  for (const line of lastUser(messages).split("\n").slice(1)) {
    const col = line
      .slice(2)
      .split(" ")
      .findIndex((c) => c !== "x" && c !== "o");
    if (col >= 0) return `I'll play here. <move>${line[0]}${col + 1}</move>`;
  }
  throw new Error("no empty cell");
}

/** Parses the 2048 board text and plays the first move that changes it. */
function first2048Move(messages: Message[]): string {
  const board = lastUser(messages)
    .split("\n")
    .flatMap((row) => row.split("|").map((c) => (c === "_" ? 0 : Number(c))));
  const moves: Direction[] = legalMoves(board);
  return `<move>${moves[0]}</move>`;
}

/** The conversation as the model saw it: Choices become assistant messages. */
const asMessages = (h: MessagesAndChoices): Message[] =>
  h.map((m) => (isChoice(m) ? { role: "assistant", content: m.message.content } : m));

describe("rolloutTicTacToe", () => {
  it("by default keeps the system message, every board, and each turn's Choice; requests are the conversation so far", async () => {
    const server = scriptedOpenAI(firstEmptyCell);
    for (const seed of [1, 2, 3, 4]) {
      server.requests.length = 0;
      const t = await rolloutTicTacToe(server.client, {
        model: "tiny",
        scenario: { seed },
        temperature: 0.7,
        maxTokens: 16,
      });
      const h = t.messagesAndChoices;
      const agent = t.metadata.agent as "x" | "o";
      expect(h[0]).toEqual({ role: "system", content: ticTacToeSystemPrompt(agent) });
      const choices = h.filter(isChoice);
      expect(choices.length).toBe(server.requests.length);
      expect(choices.length).toBe(t.metrics.moves);
      // system, then (board, choice) pairs.
      h.slice(1).forEach((m, i) => expect(isChoice(m)).toBe(i % 2 === 1));
      for (const [i, req] of server.requests.entries()) {
        expect(req.messages).toEqual(asMessages(h.slice(0, 2 + 2 * i)));
        expect(req).toMatchObject({ model: "tiny", temperature: 0.7, max_completion_tokens: 16, logprobs: true });
      }
      for (const c of choices) {
        expect(c.logprobs?.content?.map((x) => x.token).join("")).toBe(c.message.content);
        expect(c.finish_reason).toBe("stop");
      }
      const outcome = (["win", "draw", "loss"] as const).find((o) => t.metrics[o] === 1)!;
      expect(t.reward).toBe({ win: 1, draw: 0.5, loss: 0 }[outcome]);
      expect(t.metrics.invalid).toBe(0);
      expect(t.metadata).toMatchObject({ game: "tictactoe", seed });
      expect(t.logs[0]).toContain(`outcome: ${outcome}`);
      expect(t.additionalHistories).toBeUndefined();
    }
  });

  it("a decision start shows the scripted opening as earlier turns that are plain messages, not Choices", async () => {
    const server = scriptedOpenAI(firstEmptyCell);
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      server.requests.length = 0;
      const t = await rolloutTicTacToe(server.client, { model: "m", scenario: { seed, start: "decision" } });
      const h = t.messagesAndChoices;
      const firstChoice = h.findIndex(isChoice);
      const opening = h.slice(1, firstChoice - 1);
      // system, the opening's (board, plain assistant move) pairs, then (board, Choice) pairs.
      expect(opening.length % 2).toBe(0);
      opening.forEach((m, i) => expect(!isChoice(m) && m.role).toBe(i % 2 === 0 ? "user" : "assistant"));
      h.slice(firstChoice - 1).forEach((m, i) => expect(isChoice(m)).toBe(i % 2 === 1));
      expect(h.filter(isChoice).length).toBe(server.requests.length);
      expect(t.metrics.moves).toBe(server.requests.length);
      // The first request already holds the whole opening, and the agent faces a line to complete or to block.
      expect(server.requests[0].messages).toEqual(asMessages(h.slice(0, firstChoice)));
      expect(Number(t.metrics.chances) + Number(t.metrics.threats)).toBeGreaterThan(0);
      expect(t.metadata.start).toBe("decision");
    }
  });

  it("replays exactly from the scenario seed", async () => {
    const a = await rolloutTicTacToe(scriptedOpenAI(firstEmptyCell).client, { model: "m", scenario: { seed: 8 } });
    const b = await rolloutTicTacToe(scriptedOpenAI(firstEmptyCell).client, { model: "m", scenario: { seed: 8 } });
    const strip = (h: MessagesAndChoices) => asMessages(h);
    expect(strip(b.messagesAndChoices)).toEqual(strip(a.messagesAndChoices));
    expect(b.reward).toBe(a.reward);
  });

  it("explore P: a move is, with probability P, a random empty cell asked through guided_choice and kept as a Choice", async () => {
    // The server honors guided_choice as webart's does (the one choice is the reply); else the first empty cell.
    const server = scriptedOpenAI((messages, req) => {
      const guided = (req as { guided_choice?: string[] }).guided_choice;
      return guided ? guided[0] : firstEmptyCell(messages);
    });
    const guidedOf = (r: unknown) => (r as { guided_choice?: string[] }).guided_choice;
    const play = async (explore: number, seed: number) => {
      server.requests.length = 0;
      const t = await rolloutTicTacToe(server.client, { model: "tiny", seed, scenario: { seed, explore } });
      return { t, requests: [...server.requests] };
    };
    let moves = 0;
    let explored = 0;
    const cells = new Set<string>();
    for (let seed = 1; seed <= 40; seed++) {
      const { t, requests } = await play(0.5, seed);
      expect(t.metrics.invalid).toBe(0);
      expect(t.metadata.explore).toBe(0.5);
      const choices = t.messagesAndChoices.filter(isChoice);
      expect(choices.length).toBe(requests.length);
      requests.forEach((req, i) => {
        const guided = guidedOf(req);
        moves++;
        if (!guided) return;
        explored++;
        expect(guided).toHaveLength(1);
        const [, row, col] = /^<move>([ABC])([123])<\/move>$/.exec(guided[0])!;
        // The cell is empty on the board the request shows, and the reply that moved there is the turn's Choice.
        const line = lastUser(req.messages as Message[])
          .split("\n")
          .find((l) => l.startsWith(`${row} `))!;
        expect(line.slice(2).split(" ")[Number(col) - 1]).toBe(".");
        expect(choices[i].message.content).toBe(guided[0]);
        cells.add(guided[0]);
      });
    }
    expect(explored / moves).toBeGreaterThan(0.35);
    expect(explored / moves).toBeLessThan(0.65);
    expect(cells.size).toBeGreaterThan(5); // random cells, not the first empty one
    // The same sampling seed explores the same moves; 0 never explores, 1 always; out of [0, 1] is refused.
    const again = await play(0.5, 7);
    expect(again.requests.map(guidedOf)).toEqual((await play(0.5, 7)).requests.map(guidedOf));
    expect((await play(0, 7)).requests.every((r) => !guidedOf(r))).toBe(true);
    expect((await play(1, 7)).requests.every((r) => guidedOf(r))).toBe(true);
    await expect(play(1.5, 7)).rejects.toThrow(/explore must be a probability from 0 to 1 \(got 1\.5\)/);
  });

  it("legal moves: every move is asked among the empty cells of the board it shows; an exploration move is forced", async () => {
    // The server honors guided_choice as webart's does: the reply is one of the strings (here the last).
    const server = scriptedOpenAI((_, req) => (req as unknown as { guided_choice: string[] }).guided_choice.at(-1)!);
    const guidedOf = (r: unknown) => (r as { guided_choice?: string[] }).guided_choice;
    for (let seed = 1; seed <= 10; seed++) {
      server.requests.length = 0;
      const t = await rolloutTicTacToe(server.client, { model: "tiny", seed, scenario: { seed, legalMoves: true } });
      expect(t.metrics.invalid).toBe(0);
      expect(t.metadata.legalMoves).toBe(true);
      for (const req of server.requests) {
        const rows = lastUser(req.messages as Message[])
          .split("\n")
          .filter((l) => /^[ABC] /.test(l));
        const empty = rows.flatMap((l) =>
          l
            .slice(2)
            .split(" ")
            .flatMap((c, k) => (c === "." ? [`<move>${l[0]}${k + 1}</move>`] : [])),
        );
        expect(guidedOf(req)).toEqual(empty);
      }
    }
    // With exploration too, an exploring move asks for one cell; the others for all the empty ones.
    server.requests.length = 0;
    await rolloutTicTacToe(server.client, {
      model: "tiny",
      seed: 3,
      scenario: { seed: 3, legalMoves: true, explore: 1 },
    });
    expect(server.requests.every((r) => guidedOf(r)!.length === 1)).toBe(true);
  });

  it("an unparseable reply ends the game at -1 after one choice", async () => {
    const server = scriptedOpenAI(() => "The center, obviously.");
    const t = await rolloutTicTacToe(server.client, { model: "m", scenario: { seed: 1, agent: "x" } });
    expect(t.reward).toBe(-1);
    expect(t.metrics.invalid).toBe(1);
    expect(t.messagesAndChoices.filter(isChoice).length).toBe(1);
    expect(t.logs[0]).toMatch(/no move/);
  });

  it("a server error rejects the rollout (for gather to count it)", async () => {
    const server = scriptedOpenAI(() => {
      throw new Error("model crashed");
    });
    await expect(rolloutTicTacToe(server.client, { model: "m", scenario: { seed: 1 } })).rejects.toThrow(
      /model crashed/,
    );
  });

  it("chatPlayer evaluates a model through the same prompts", async () => {
    const server = scriptedOpenAI(firstEmptyCell);
    const r = await evaluateTicTacToe(chatPlayer(server.client, { model: "m" }), { games: 10, seed: 3 });
    expect(r.invalid).toBe(0);
    expect(r.win + r.draw + r.loss).toBeCloseTo(1, 12);
    expect(server.requests[0].messages[0].role).toBe("system");
  });
});

describe("rolloutTicTacToe with historyTurns 0", () => {
  it("makes each move its own (system, board, choice) history, all sharing the game's reward", async () => {
    const server = scriptedOpenAI(firstEmptyCell);
    const t = await rolloutTicTacToe(server.client, { model: "m", scenario: { seed: 5 }, historyTurns: 0 });
    const histories = [t.messagesAndChoices, ...(t.additionalHistories ?? []).map((h) => h.messagesAndChoices)];
    expect(histories.length).toBe(server.requests.length);
    expect(histories.length).toBeGreaterThan(2);
    for (const [i, h] of histories.entries()) {
      expect(h.length).toBe(3);
      expect(isChoice(h[2])).toBe(true);
      expect(server.requests[i].messages).toEqual(asMessages(h.slice(0, 2)));
    }
    expect(t.metadata).toMatchObject({ game: "tictactoe", seed: 5, historyTurns: 0 });
  });
});

describe("rollout2048", () => {
  it("by default makes each move its own short history, all sharing the reward", async () => {
    const server = scriptedOpenAI(first2048Move);
    const t = await rollout2048(server.client, { model: "m", scenario: { seed: 2, winningValue: 16 } });
    const histories = [t.messagesAndChoices, ...(t.additionalHistories ?? []).map((h) => h.messagesAndChoices)];
    expect(histories.length).toBe(server.requests.length);
    expect(histories.length).toBe(t.metrics.moves);
    expect(histories.length).toBeGreaterThan(3);
    for (const [i, h] of histories.entries()) {
      expect(h.length).toBe(3); // system, board, choice
      expect(isChoice(h[2])).toBe(true);
      expect(server.requests[i].messages).toEqual(asMessages(h.slice(0, 2)));
    }
    expect(t.metrics.win).toBe(1);
    expect(t.reward).toBe(2);
    expect(t.metadata).toMatchObject({ game: "2048", seed: 2, winningValue: 16, historyTurns: 0 });
  });

  it("with historyTurns k, each prompt carries the last k (board, move) pairs", async () => {
    const k = 2;
    const server = scriptedOpenAI(first2048Move);
    const t = await rollout2048(server.client, {
      model: "m",
      scenario: { seed: 3, winningValue: 16 },
      historyTurns: k,
    });
    const reqs = server.requests.map((r) => r.messages);
    for (const [i, msgs] of reqs.entries()) {
      expect(msgs.length).toBe(2 + 2 * Math.min(i, k));
      // The earlier pairs are exactly the previous requests' boards and the replies given to them.
      for (let j = 1; j <= Math.min(i, k); j++) {
        const prev = reqs[i - j];
        expect(msgs[msgs.length - 1 - 2 * j]).toEqual(prev[prev.length - 1]);
      }
    }
    const histories = [t.messagesAndChoices, ...(t.additionalHistories ?? []).map((h) => h.messagesAndChoices)];
    expect(histories.length).toBe(reqs.length);
    histories.forEach((h, i) => expect(asMessages(h.slice(0, -1))).toEqual(reqs[i]));
  });

  it("a move that changes nothing wastes the turn; a reply with no direction ends the game at -1", async () => {
    const boardOf = (messages: Message[]) =>
      lastUser(messages)
        .split("\n")
        .flatMap((row) => row.split("|").map((c) => (c === "_" ? 0 : Number(c))));
    // Always a move that changes nothing: tiles only spawn, until the board is full and the game is stuck.
    const wasteful = scriptedOpenAI((messages) => {
      const legal = legalMoves(boardOf(messages));
      return `<move>${(["left", "right", "up", "down"] as const).find((d) => !legal.includes(d)) ?? legal[0]}</move>`;
    });
    const w = await rollout2048(wasteful.client, { model: "m", scenario: { seed: 4 } });
    expect(w.metrics.invalid).toBe(0);
    expect(Number(w.metrics.noops)).toBeGreaterThan(0);
    expect(w.metrics.moves).toBe(wasteful.requests.length);
    expect(w.reward).toBeGreaterThan(-1);

    const server = scriptedOpenAI(() => `<move>sideways</move>`);
    const t = await rollout2048(server.client, { model: "m", scenario: { seed: 4 } });
    expect(t.reward).toBe(-1);
    expect(t.metrics.invalid).toBe(1);
    expect(server.requests.length).toBe(1);
  });
});
