// The training form's defaults are `npm run train`'s recipe, and its fields are checked by name.
import { expect, it } from "vitest";
import { CUSTOM_DEFAULTS, GAMES } from "webart/envs";
import { defaultDraft, draftFrom, switchEnv, validate } from "./settings.ts";

it("defaults to the CLI's tic-tac-toe recipe, and round-trips through a saved run's settings", () => {
  const d = defaultDraft();
  const { settings, errors } = validate(d);
  expect(errors).toEqual({});
  expect(settings!.steps).toBe(GAMES.tictactoe.train.steps);
  expect(settings!.opponents).toBe((GAMES.tictactoe.train.opponents ?? ["random"]).join(","));
  expect(settings!.starts).toBe((GAMES.tictactoe.train.starts ?? ["empty"]).join(","));
  expect(settings!.beta).toBe(GAMES.tictactoe.train.beta ?? 0);
  expect(settings!.maxGroups).toBe(GAMES.tictactoe.train.maxGroups ?? GAMES.tictactoe.train.groupsPerStep);
  expect(settings!.decisionReward).toBe(GAMES.tictactoe.train.decisionReward ?? 0);
  expect(validate(draftFrom("again", settings!, d)).settings).toEqual(settings);
});

it("takes a KL penalty from 0 (none) and names the field when it is not one", () => {
  expect(validate({ ...defaultDraft(), beta: "0" }).settings!.beta).toBe(0);
  expect(validate({ ...defaultDraft(), beta: "0.05" }).settings!.beta).toBe(0.05);
  for (const bad of ["-0.1", "", "strong", "11"])
    expect(validate({ ...defaultDraft(), beta: bad }).errors.beta).toMatch(/KL penalty \(beta\) must be a number/);
});

it("draws at least the groups per step; empty, or a run saved without the setting, draws no more", () => {
  expect(validate({ ...defaultDraft(), groupsPerStep: "4", maxGroups: "12" }).settings!.maxGroups).toBe(12);
  expect(validate({ ...defaultDraft(), groupsPerStep: "4", maxGroups: "3" }).errors.maxGroups).toBe(
    "Most groups drawn a step must be at least the groups per step (4)",
  );
  expect(validate({ ...defaultDraft(), maxGroups: "lots" }).errors.maxGroups).toMatch(/must be a whole number/);
  expect(validate({ ...defaultDraft(), groupsPerStep: "3", maxGroups: " " }).settings!.maxGroups).toBe(3);
  const { maxGroups: _, ...old } = validate({ ...defaultDraft(), groupsPerStep: "3" }).settings!;
  expect(draftFrom("old", old, defaultDraft()).maxGroups).toBe("");
  expect(validate(draftFrom("old", old, defaultDraft())).settings!.maxGroups).toBe(3);
});

it("takes a decision reward from 0 (the outcome alone), names the field when it is not one, and reads old runs as 0", () => {
  expect(validate({ ...defaultDraft(), decisionReward: "0.5" }).settings!.decisionReward).toBe(0.5);
  for (const bad of ["-1", "", "some", "11"])
    expect(validate({ ...defaultDraft(), decisionReward: bad }).errors.decisionReward).toMatch(
      /Decision reward must be a number from 0/,
    );
  const { decisionReward: _, ...old } = validate({ ...defaultDraft(), decisionReward: "0.5" }).settings!;
  expect(draftFrom("old", old, defaultDraft()).decisionReward).toBe("0");
});

it("takes an exploration probability in [0, 1] for tic-tac-toe and guided email, names the field otherwise, and reads old runs as 0", () => {
  expect(validate({ ...defaultDraft(), explore: "0.1" }).settings!.explore).toBe(0.1);
  for (const bad of ["-0.1", "", "often", "1.5"])
    expect(validate({ ...defaultDraft(), explore: bad }).errors.explore).toMatch(/Exploration must be a probability/);
  const email = { ...defaultDraft(), env: "email" as const, maxTokens: "200", explore: "often" };
  expect(validate(email).errors.explore).toBeUndefined();
  expect(validate(email).settings!.explore).toBeUndefined();
  const guided = { ...email, toolChoice: "guided" as const };
  expect(validate(guided).errors.explore).toMatch(/Exploration must be a probability/);
  expect(validate({ ...guided, explore: "0.3" }).settings!.explore).toBe(0.3);
  const { explore: _, ...old } = validate({ ...defaultDraft(), explore: "0.1" }).settings!;
  expect(draftFrom("old", old, defaultDraft()).explore).toBe("0");
});

it("samples training moves among the legal ones for tic-tac-toe only when asked; old runs do not", () => {
  expect(validate(defaultDraft()).settings!.legalMoves).toBeUndefined();
  const on = validate({ ...defaultDraft(), legalMoves: true }).settings!;
  expect(on.legalMoves).toBe(true);
  expect(draftFrom("on", on, defaultDraft()).legalMoves).toBe(true);
  const email = { ...defaultDraft(), env: "email" as const, maxTokens: "200", legalMoves: true };
  expect(validate(email).settings!.legalMoves).toBeUndefined();
  const { legalMoves: _, ...old } = on;
  expect(draftFrom("old", old, defaultDraft()).legalMoves).toBe(false);
});

it("forces tool calls for email only when asked; other envs and old runs leave them to the model", () => {
  const email = { ...defaultDraft(), env: "email" as const, maxTokens: "200" };
  expect(validate(email).settings!.toolChoice).toBeUndefined();
  const forced = validate({ ...email, toolChoice: "required" }).settings!;
  expect(forced.toolChoice).toBe("required");
  expect(draftFrom("again", forced, defaultDraft()).toolChoice).toBe("required");
  expect(validate({ ...email, toolChoice: "guided" }).settings!.toolChoice).toBe("guided");
  expect(validate({ ...defaultDraft(), toolChoice: "required" }).settings!.toolChoice).toBeUndefined();
  const { toolChoice: _, ...old } = forced;
  expect(draftFrom("old", old, defaultDraft()).toolChoice).toBe("auto");
});

it("picking the email env takes its training defaults (guided calls at 1.5), keeping what the user changed", () => {
  const email = switchEnv(defaultDraft(), "email");
  const t = GAMES.email.train;
  expect(email).toMatchObject({ env: "email", toolChoice: t.toolChoice, temperature: String(t.temperature) });
  expect(email).toMatchObject({ groupsPerStep: String(t.groupsPerStep), maxGroups: String(t.maxGroups) });
  expect(email).toMatchObject({ groupSize: String(t.groupSize), explore: String(t.explore ?? 0) });
  expect(email).toMatchObject({ steps: String(t.steps), maxTokens: String(GAMES.email.maxTokens) });
  expect(validate(email).settings).toMatchObject({ toolChoice: "guided", temperature: 1.5 });
  // Back to tic-tac-toe: its own defaults again; a setting the user changed stays through both switches.
  expect(switchEnv(email, "tictactoe")).toEqual(defaultDraft());
  const mine = switchEnv(switchEnv({ ...defaultDraft(), temperature: "0.7" }, "email"), "tictactoe");
  expect(mine.temperature).toBe("0.7");
});

it("picking a custom task takes its defaults (replies in words: 128 tokens, 20 steps), as webart train --env custom", () => {
  const custom = switchEnv(defaultDraft(), "custom");
  expect(custom).toMatchObject({
    steps: String(CUSTOM_DEFAULTS.steps),
    groupSize: String(CUSTOM_DEFAULTS.groupSize),
    groupsPerStep: String(CUSTOM_DEFAULTS.groupsPerStep),
    maxTokens: "128",
    valEvery: "5",
    reward: "ruler",
  });
  // Back to tic-tac-toe: its defaults again (the judge stays picked, as a game can be judged too).
  expect({ ...switchEnv(custom, "tictactoe"), reward: "env" }).toEqual(defaultDraft());
});

it("takes a custom task's warm start only when training scenarios have an answer, and round-trips it", () => {
  const custom = {
    ...switchEnv(defaultDraft(), "custom"),
    reward: "self" as const,
    systemPrompt: "Answer in one word.",
    scenarioFormat: "jsonl" as const,
    scenarioText: [
      '{"prompt": "Name a colour", "answer": "Red"}',
      '{"prompt": "Name a fruit", "answer": "Pear"}',
      '{"prompt": "Name a tree", "answer": "Oak"}',
      '{"prompt": "Name a bird", "answer": "Wren"}',
    ].join("\n"),
    warmStart: "2",
  };
  const { settings, errors } = validate(custom);
  expect(errors).toEqual({});
  expect(settings!.custom!.warmStartEpochs).toBe(2);
  expect(validate(draftFrom("again", settings!, custom)).settings).toEqual(settings);
  expect(validate({ ...custom, warmStart: "0" }).settings!.custom!.warmStartEpochs).toBeUndefined();
  expect(validate({ ...custom, warmStart: "-1" }).errors.warmStart).toBe("Warm start must be between 0 and 100");
  const noAnswers = {
    ...custom,
    scenarioFormat: "lines" as const,
    scenarioText: "Name a colour\nName a fruit\nName a tree",
  };
  expect(validate(noAnswers).errors.warmStart).toMatch(
    /the scenarios' "answer" field, and no training scenario has one/,
  );
  expect(validate({ ...noAnswers, warmStart: "0" }).errors).toEqual({});
});

it("loads the base model's projections as q4 only when asked, for every env; old runs do not", () => {
  expect(validate(defaultDraft()).settings!.quantize).toBeUndefined();
  const on = validate({ ...defaultDraft(), q4: true }).settings!;
  expect(on.quantize).toBe("q4");
  expect(draftFrom("on", on, defaultDraft()).q4).toBe(true);
  const email = { ...defaultDraft(), env: "email" as const, maxTokens: "200", q4: true };
  expect(validate(email).settings!.quantize).toBe("q4");
  const { quantize: _, ...old } = on;
  expect(draftFrom("old", old, defaultDraft()).q4).toBe(false);
});
