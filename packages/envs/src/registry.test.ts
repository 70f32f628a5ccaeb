// The game registry: a step's scenarios (seed formula, groups sharing a scenario, opponents in turn), names
// checked with messages that list the choices, and each game's rollout and summary through a scripted client.
import { describe, expect, it } from "vitest";
import { GAMES, gameByName, parseOpponents, parseStarts, stepScenarios } from "./registry.ts";
import { trainingScenarioSeed } from "./rollout.ts";
import { scriptedOpenAI } from "./scripted.ts";
import { emailScenario, emailScenarioSeed, naiveSearcher, perfectSearcher } from "./email/index.ts";

describe("game registry", () => {
  it("a step's groups each share one scenario, seeded by trainingScenarioSeed, opponents taken in turn", () => {
    const s = stepScenarios(7, { seed: 3, groupsPerStep: 3, groupSize: 2, opponents: ["random", "winning"] });
    expect(s).toEqual(
      [0, 1, 2].map((g) =>
        Array(2).fill({ seed: trainingScenarioSeed(3, 7, g), opponent: ["random", "winning", "random"][g] }),
      ),
    );
    expect(
      stepScenarios(0, { seed: 1, groupsPerStep: 2, groupSize: 1 })
        .flat()
        .map((x) => x.opponent),
    ).toEqual(["random", "random"]);
  });

  it("independent scenarios: every rollout of a step plays its own seed, still opponents by group", () => {
    const s = stepScenarios(2, {
      seed: 5,
      groupsPerStep: 2,
      groupSize: 3,
      opponents: ["random", "winning"],
      scenarios: "independent",
    });
    expect(s.flat().map((x) => x.seed)).toEqual([0, 1, 2, 3, 4, 5].map((i) => trainingScenarioSeed(5, 2, i)));
    expect(s.map((g) => g.map((x) => x.opponent))).toEqual([Array(3).fill("random"), Array(3).fill("winning")]);
    expect(() => stepScenarios(0, { seed: 1, groupsPerStep: 40, groupSize: 32, scenarios: "independent" })).toThrow(
      /over 1000 games a step/,
    );
  });

  it("a step's later groups (dynamic sampling) continue the seeds, opponents and starts from their index", () => {
    const s = {
      seed: 4,
      groupsPerStep: 2,
      groupSize: 2,
      opponents: ["random", "winning"],
      starts: ["decision"],
    } as const;
    const all = stepScenarios(3, s, { from: 0, count: 5 });
    expect(stepScenarios(3, s)).toEqual(all.slice(0, 2));
    expect(stepScenarios(3, s, { from: 2, count: 3 })).toEqual(all.slice(2));
    expect(all.map((g) => [g[0].seed, g[0].opponent])).toEqual(
      [0, 1, 2, 3, 4].map((g) => [trainingScenarioSeed(4, 3, g), ["random", "winning"][g % 2]]),
    );
    expect(() => stepScenarios(0, s, { from: 990, count: 11 })).toThrow(/1001 groups is over 1000 a step/);
  });

  it("tic-tac-toe starts are taken in turn by group; an empty start is left out of the scenario", () => {
    const s = stepScenarios(1, { seed: 2, groupsPerStep: 3, groupSize: 2, starts: ["empty", "decision"] });
    expect(s.map((g) => g.map((x) => x.start))).toEqual([
      [undefined, undefined],
      ["decision", "decision"],
      [undefined, undefined],
    ]);
    expect(parseStarts(" empty , decision")).toEqual(["empty", "decision"]);
    expect(() => parseStarts("empty,middle")).toThrow('start "middle" is not known (available: empty, decision)');
  });

  it("unknown games and opponents are refused with the choices", () => {
    expect(gameByName("2048").name).toBe("2048");
    expect(() => gameByName("chess")).toThrow('unknown environment "chess" (available: tictactoe, 2048, email)');
    expect(parseOpponents(" random,blocking ")).toEqual(["random", "blocking"]);
    expect(() => parseOpponents("random,grandmaster")).toThrow(
      'opponent "grandmaster" is not known (available: random, winning, blocking, minimax)',
    );
  });

  it("a tic-tac-toe rollout plays the scenario's opponent; the summary and score come from the trajectories", async () => {
    // Always the first empty cell: against the winning opponent the game ends when it completes a line.
    const { client } = scriptedOpenAI((messages) => {
      const board = String(messages[messages.length - 1].content)
        .split("\n")
        .slice(1);
      const cells = board.flatMap((row) => row.slice(2).split(" "));
      const i = cells.indexOf(".");
      return `<move>${"ABC"[Math.floor(i / 3)]}${(i % 3) + 1}</move>`;
    });
    const sampling = { model: "m", temperature: 1, maxTokens: 8 };
    const games = await Promise.all(
      [1, 2, 3, 4].map((seed) =>
        GAMES.tictactoe.rollout(client, { ...sampling, scenario: { seed, opponent: "winning" } }),
      ),
    );
    expect(games.map((g) => g.metadata.opponent)).toEqual(Array(4).fill("winning"));
    const summary = GAMES.tictactoe.summarize(games);
    expect(summary.games).toBe(4);
    expect(GAMES.tictactoe.score(games)).toBeCloseTo(summary.win + summary.draw, 12);
    // A decision reward reaches the game's reward (the step's scenarios carry it); the outcome's rates do not move.
    const scenarios = stepScenarios(0, { seed: 5, groupsPerStep: 2, groupSize: 2, decisionReward: 0.5 }).flat();
    expect(scenarios.every((x) => x.decisionReward === 0.5)).toBe(true);
    expect(stepScenarios(0, { seed: 5, groupsPerStep: 1, groupSize: 1 })[0][0]).not.toHaveProperty("decisionReward");
    const explored = stepScenarios(0, { seed: 5, groupsPerStep: 2, groupSize: 2, explore: 0.2 }).flat();
    expect(explored.every((x) => x.explore === 0.2)).toBe(true);
    expect(stepScenarios(0, { seed: 5, groupsPerStep: 1, groupSize: 1 })[0][0]).not.toHaveProperty("explore");
    const legal = stepScenarios(0, { seed: 5, groupsPerStep: 2, groupSize: 2, legalMoves: true }).flat();
    expect(legal.every((x) => x.legalMoves === true)).toBe(true);
    expect(stepScenarios(0, { seed: 5, groupsPerStep: 1, groupSize: 1 })[0][0]).not.toHaveProperty("legalMoves");
    const play = (decisionReward?: number) =>
      Promise.all(
        [1, 2, 3, 4, 5, 6].map((seed) =>
          GAMES.tictactoe.rollout(client, {
            ...sampling,
            scenario: { seed, opponent: "winning", start: "decision", decisionReward },
          }),
        ),
      );
    const plain = await play();
    const shaped = await play(0.5);
    const rates = (t: typeof plain) => ({ ...GAMES.tictactoe.summarize(t), meanReward: 0 });
    expect(rates(shaped)).toEqual(rates(plain));
    const outcome = (t: (typeof plain)[number]) => {
      const m = t.metrics as Record<string, number>;
      return m.win + 0.5 * m.draw - m.invalid;
    };
    shaped.forEach((t, i) => {
      const m = t.metrics as Record<string, number>;
      const right = m.winsTaken + m.blocks;
      const faced = m.chances + m.threats;
      expect(faced).toBeGreaterThan(0); // a decision start faces one at once
      expect(plain[i].reward).toBe(outcome(plain[i]));
      expect(t.reward).toBeCloseTo(plain[i].reward + (0.5 * (2 * right - faced)) / faced, 12);
    });
  });

  it("an email rollout plays the split's scenario (training's unless told), scored by accuracy", async () => {
    const sampling = { model: "m", temperature: 1, maxTokens: GAMES.email.maxTokens };
    const perfect = await Promise.all(
      [0, 1, 2].map((i) =>
        GAMES.email.rollout(scriptedOpenAI(perfectSearcher(emailScenario("eval", i))).client, {
          ...sampling,
          scenario: { seed: i, split: "eval" },
        }),
      ),
    );
    expect(perfect.map((t) => t.metadata.seed)).toEqual([0, 1, 2].map((i) => emailScenarioSeed("eval", i)));
    expect(perfect.map((t) => t.metadata.split)).toEqual(["eval", "eval", "eval"]);
    expect(GAMES.email.score(perfect)).toBe(1);
    expect(GAMES.email.summarize(perfect)).toMatchObject({ episodes: 3, accuracy: 1, meanTurns: 3 });
    const train = await GAMES.email.rollout(scriptedOpenAI(naiveSearcher()).client, {
      ...sampling,
      scenario: { seed: 0 },
    });
    expect([train.metadata.seed, train.metadata.split]).toEqual([emailScenarioSeed("train", 0), "train"]);
    expect(GAMES.email.scoreName).toBe("accuracy");
  });
});
