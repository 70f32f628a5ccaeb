// A task of your own in the tab, end to end in Chromium (WebGPU on SwiftShader) with the local judge server: bad
// input refused in the form, a custom task trained with its validation point, chat beside the base model, the
// downloads, 2048's play board, two runs on one chart, the loaded model refused as its own judge (RULER's prompt
// does not fit webart-tiny's context) and a multi-turn task with its simulated user. One page of its own across
// these serial tests.
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { expect, test, type Page } from "@playwright/test";
import { readRunFile } from "./idb.ts";
import { startJudge, type Judge } from "./judge.ts";

test.describe.configure({ mode: "serial" });

let page: Page;
let judge: Judge;
let problems: string[] = [];
const CUSTOM_RUN = `custom-e2e-${Date.now().toString(36)}`;
const GAME_RUN = `g2048-play-${Date.now().toString(36)}`;
const SELF_RUN = `custom-self-${Date.now().toString(36)}`;
const TURNS_RUN = `custom-turns-${Date.now().toString(36)}`;
const WARM_RUN = `custom-warm-${Date.now().toString(36)}`;

const shot = (name: string) => page.screenshot({ path: `test-results/screens/${name}.png`, fullPage: true });
const start = () => page.getByRole("button", { name: "Start" });
const state = () => page.getByTestId("state");

/** A base URL where nothing listens: a port taken and given back. */
async function deadURL(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return `http://127.0.0.1:${port}/v1`;
}

async function tiny(name: string, steps: number) {
  await page.getByLabel("Run name").fill(name);
  await page.getByLabel("Steps", { exact: true }).fill(String(steps));
  await page.getByLabel("Group size").fill("2");
  await page.getByLabel("Groups per step").fill("1");
  await page.getByLabel("Max tokens per move").fill("8");
  await page.getByLabel("Temperature").fill("2");
}

const upload = (name: string, text: string) =>
  page.getByLabel("Upload scenarios").setInputFiles({ name, mimeType: "text/plain", buffer: Buffer.from(text) });

test.beforeAll(async ({ browser }) => {
  judge = await startJudge();
  page = await (await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } })).newPage();
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto("/");
  await expect(page.getByTestId("model-info")).toContainText("webart-tiny", { timeout: 60_000 });
});

test.afterAll(async () => {
  await judge?.close();
});

test.beforeEach(() => {
  problems = [];
});

test("custom task: each bad input shows its message in the form and nothing starts", async () => {
  await page.getByLabel("Environment").selectOption("custom");
  await expect(page.getByLabel("Reward", { exact: true })).toHaveValue("ruler");
  await tiny(CUSTOM_RUN, 2);
  await page.getByLabel("System prompt").fill("You are a friendly assistant. Answer in one short sentence.");
  // An empty list.
  await expect(page.getByTestId("error-scenarioText")).toContainText("The scenario list is empty");
  await expect(start()).toBeDisabled();
  // Malformed JSONL, named by its line.
  await upload("bad.jsonl", '{"prompt": "Say hi"}\n{"prompt": "Say bye"\n');
  await expect(page.getByLabel("Scenario format")).toHaveValue("jsonl");
  await expect(page.getByTestId("error-scenarioText")).toContainText("JSONL line 2: not valid JSON");
  await expect(start()).toBeDisabled();
  // A CSV without a prompt column.
  await upload("bad.csv", "question,answer\nSay hi,hi\n");
  await expect(page.getByTestId("error-scenarioText")).toContainText('The CSV has no "prompt" column');
  await expect(start()).toBeDisabled();
  // Six good prompts (CSV with a field only the judge sees).
  await upload(
    "good.csv",
    "prompt,expected\nSay hi,a greeting\nName a colour,a colour\nCount to three,1 2 3\n" +
      "Name a fruit,a fruit\nSay bye,a farewell\nName an animal,an animal\n",
  );
  await expect(page.getByTestId("error-scenarioText")).toHaveCount(0);
  await page.getByLabel("Validate every (steps)").fill("2");
  await page.getByRole("button", { name: "Use ART's default rubric" }).click();
  await expect(page.getByLabel("Rubric")).toHaveValue(/reaches the goal/);
  // Judges that cannot serve RULER: checked once when Start is pressed; the run is not created.
  const before = judge.requests.length;
  await page.getByLabel("Judge base URL").fill(await deadURL());
  await page.getByLabel("Judge model").fill("judge-1");
  await expect(start()).toBeEnabled({ timeout: 60_000 });
  await start().click();
  await expect(page.getByTestId("error-judge")).toContainText("does not answer");
  await page.getByLabel("Judge base URL").fill(judge.baseURL);
  await page.getByLabel("Judge model").fill("no-schema");
  await start().click();
  await expect(page.getByTestId("error-judge")).toContainText("refused response_format json_schema");
  await page.getByLabel("Judge model").fill("prose");
  await start().click();
  await expect(page.getByTestId("error-judge")).toContainText("not in RULER's JSON schema");
  expect(judge.requests.length - before).toBe(2);
  await expect(page.getByTestId(`run-${CUSTOM_RUN}`)).toHaveCount(0);
  await expect(page.getByTestId("status")).toContainText("No run yet");
  await shot("custom-bad-judge");
  expect(problems).toEqual([]);
});

test("a custom task with 6 prompts trains 2 steps with the local judge and shows the validation point", async () => {
  await page.getByLabel("Judge model").fill("judge-1");
  await expect(page.getByTestId("error-judge")).toHaveCount(0);
  await shot("custom-form");
  await page
    .locator("section[aria-labelledby=settings-h]")
    .screenshot({ path: "test-results/screens/custom-form-panel.png" });
  const before = judge.requests.length;
  await start().click();
  await expect(state()).toHaveText("finished", { timeout: 170_000 });
  await expect(page.getByTestId("step")).toHaveText("2");
  // The check, one group per step, and one validation group (the one held-out prompt of six).
  expect(judge.requests.length - before).toBe(4);
  await expect(page.getByTestId("chart-reward")).toHaveAttribute("data-points", "2");
  const val = page.getByTestId("chart-val");
  await expect(val).toHaveAttribute("data-points", "1");
  await expect(val.locator("g.series circle")).toHaveCount(2); // base model and checkpoint at step 2
  await shot("custom-charts");
  await page.getByLabel("Training charts").screenshot({ path: "test-results/screens/custom-charts-panel.png" });
  await page.getByRole("tab", { name: "Rollouts" }).click();
  await expect(page.locator(".ruler-note")).toContainText("RULER score");
  await expect(page.getByRole("list", { name: "Conversation" })).toContainText("one short sentence");
  await shot("custom-rollouts");
  expect(problems).toEqual([]);
});

test("Play for a custom task: the checkpoint and the base model answer side by side", async () => {
  await page.getByRole("tab", { name: "Play" }).click();
  await page.getByLabel("Message").fill("Say hi");
  await page.getByRole("button", { name: "Send" }).click();
  await expect(page.getByTestId("chat-model").locator(".msg.assistant")).toHaveCount(1, { timeout: 60_000 });
  await expect(page.getByTestId("chat-base").locator(".msg.assistant")).toHaveCount(1);
  await shot("custom-play");
  expect(problems).toEqual([]);
});

test("downloads: a run's trajectories as JSONL and its chart as SVG", async () => {
  const get = async (label: string) => {
    const [d] = await Promise.all([page.waitForEvent("download"), page.getByLabel(label).click()]);
    return { name: d.suggestedFilename(), text: readFileSync((await d.path())!, "utf8") };
  };
  const traj = await get(`Download trajectories of ${CUSTOM_RUN}`);
  expect(traj.name).toBe(`${CUSTOM_RUN}-trajectories.jsonl`);
  const lines = traj.text
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  expect(lines.map((l) => `${l.split}/${l.step}`)).toEqual(["train/1", "train/2", "val/2"]);
  expect(lines[2].trajectories.map((t: { metadata: { policy: string } }) => t.metadata.policy)).toEqual([
    "base",
    "checkpoint",
  ]);
  expect(JSON.stringify(lines[0])).toContain("RULER score");
  const svg = await get(`Download chart of ${CUSTOM_RUN}`);
  expect(svg.name).toBe(`${CUSTOM_RUN}-chart.svg`);
  expect(svg.text).toMatch(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  expect(svg.text).toContain("validation: checkpoint");
  expect(problems).toEqual([]);
});

test("Play for 2048: the model's moves on a board", async () => {
  await page.getByRole("tab", { name: "Charts" }).click();
  await page.getByLabel("Environment").selectOption("2048");
  await expect(page.getByLabel("Reward", { exact: true })).toHaveValue("env");
  await tiny(GAME_RUN, 1);
  await page.getByLabel("Max tokens per move").fill("12");
  await start().click();
  await expect(state()).toHaveText("finished", { timeout: 170_000 });
  await page.getByRole("tab", { name: "Play" }).click();
  await page.getByRole("button", { name: "New game" }).click();
  await expect(page.locator(".play .b2048 .tile:not(:empty)")).toHaveCount(2); // the two spawned tiles
  await page.getByRole("button", { name: "Model's move" }).click();
  await expect(page.getByTestId("play-moves").locator("li")).toHaveCount(1, { timeout: 60_000 });
  await expect(page.getByTestId("play-message")).toContainText(/Moves [01]/);
  await shot("play-2048");
  expect(problems).toEqual([]);
});

test("two runs compared on one chart", async () => {
  await page.getByRole("tab", { name: "Charts" }).click();
  await page.getByLabel(`Compare ${CUSTOM_RUN}`).check();
  await page.getByLabel(`Compare ${GAME_RUN}`).check();
  const chart = page.getByTestId("chart-compare");
  await expect(chart).toHaveAttribute("data-series", "2");
  await expect(chart.locator("g.series")).toHaveCount(2);
  await expect(chart.locator(".legend")).toContainText(CUSTOM_RUN);
  await expect(chart.locator(".legend")).toContainText(GAME_RUN);
  await shot("compare");
  expect(problems).toEqual([]);
});

/** A custom task of two prompts (one trains, one validates) on a fresh form. */
async function customTask(name: string) {
  await page.getByRole("tab", { name: "Charts" }).click();
  await page.getByLabel("Environment").selectOption("custom");
  await tiny(name, 1);
  await page.getByLabel("System prompt").fill("Answer briefly.");
  await upload("two.txt", "Say hi\nName a colour\n");
  await page.getByLabel("Validate every (steps)").fill("1");
}

test("the loaded model as its own judge: the form says it cannot hold RULER's prompt, and nothing starts", async () => {
  await customTask(SELF_RUN);
  await page.getByLabel("Reward", { exact: true }).selectOption("self");
  await expect(page.getByLabel("Judge base URL")).toHaveCount(0);
  await page.getByLabel("Turns").fill("1");
  await expect(start()).toBeEnabled({ timeout: 60_000 });
  await start().click();
  // webart-tiny's tokenizer is byte-level: RULER's instructions and rubric alone are about 1000 of its tokens, and
  // the engine gives it a 1024-token context, so the check refuses before a run exists.
  const err = page.getByTestId("error-judge");
  await expect(err).toContainText("The loaded model cannot be its own judge for this task");
  await expect(err).toContainText(/RULER's prompt for a group of 2 conversations takes \d+ tokens of webart-tiny/);
  await expect(err).toContainText("beyond the 1024-token context");
  await expect(err).toContainText("RULER (LLM judge)");
  await expect(page.getByTestId(`run-${SELF_RUN}`)).toHaveCount(0);
  await expect(page.getByTestId("status")).not.toContainText(SELF_RUN);
  await shot("custom-self-judge");
  // Changing what the prompt holds clears the message until Start asks again.
  await page.getByLabel("Rubric").fill("Short answers win.");
  await expect(err).toHaveCount(0);
  expect(problems).toEqual([]);
});

test("a multi-turn custom task: the simulated user's turn sits between the assistant's replies", async () => {
  await customTask(TURNS_RUN);
  await page.getByLabel("Reward", { exact: true }).selectOption("ruler");
  await page.getByLabel("Judge base URL").fill(judge.baseURL);
  await page.getByLabel("Judge model").fill("judge-1");
  await page.getByLabel("Turns").fill("2");
  await page.getByLabel("User simulator prompt").fill("You are a curious user: ask one short follow-up question.");
  await expect(start()).toBeEnabled({ timeout: 60_000 });
  await start().click();
  await expect(state()).toHaveText("finished", { timeout: 170_000 });
  await expect(page.getByTestId("step")).toHaveText("1");
  await page.getByRole("tab", { name: "Rollouts" }).click();
  const convo = page.getByRole("list", { name: "Conversation" });
  // The step's trajectories are read back from storage: allow for a loaded machine (CI once saw none within 5 s).
  await expect(convo.locator("li .role")).toHaveText(["system", "user", "assistant", "user (simulated)", "assistant"], {
    timeout: 30_000,
  });
  await expect(convo.locator("li.msg.user").first()).toContainText(/^user(Say hi|Name a colour)$/);
  await expect(page.getByTestId("traj-meta")).toContainText("turns 2");
  await expect(page.locator(".ruler-note")).toContainText(/RULER score .*: judged \d of 2/);
  await shot("custom-multiturn");
  await page.getByLabel("Rollout viewer").screenshot({ path: "test-results/screens/custom-multiturn-viewer.png" });
  expect(problems).toEqual([]);
});

test("a warm start on reference answers: supervised steps first, then GRPO, whose steps alone are charted", async () => {
  await customTask(WARM_RUN);
  await page.getByLabel("Reward", { exact: true }).selectOption("ruler");
  await page.getByLabel("Judge base URL").fill(judge.baseURL);
  await page.getByLabel("Judge model").fill("judge-1");
  await page.getByRole("textbox", { name: "Turns" }).fill("1");
  await page.getByLabel("Warm start (epochs)").fill("2");
  // Prompts alone have no answer to learn from: the form says so and nothing starts.
  await expect(page.getByTestId("error-warmStart")).toContainText("no training scenario has one");
  await expect(start()).toBeDisabled();
  await upload(
    "answers.jsonl",
    '{"prompt": "Say hi", "answer": "Hi!"}\n{"prompt": "Name a colour", "answer": "Red."}\n' +
      '{"prompt": "Name a fruit", "answer": "Pear."}\n',
  );
  await expect(page.getByTestId("error-warmStart")).toHaveCount(0);
  await expect(start()).toBeEnabled({ timeout: 60_000 });
  await start().click();
  await expect(state()).toHaveText("finished", { timeout: 170_000 });
  // Two supervised steps on the two training scenarios' answers, then the one GRPO step asked for.
  await expect(page.getByTestId("step")).toHaveText("3");
  await expect(page.getByTestId("notices")).toContainText(
    /Warm start 2\/2: supervised loss [\d.]+ on 2 reference answers/,
  );
  await expect(page.getByTestId("notices")).not.toContainText("Warm start 1/2");
  await expect(page.getByTestId("chart-reward")).toHaveAttribute("data-points", "1");
  const history = await readRunFile(page, `web/models/${WARM_RUN}/history.jsonl`);
  const rows = history
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(rows.filter((r) => typeof r["train/sft_loss"] === "number").map((r) => r.step)).toEqual([1, 2]);
  expect(rows.filter((r) => typeof r["train/reward"] === "number").map((r) => r.step)).toEqual([3]);
  await shot("custom-warm-start");
  expect(problems).toEqual([]);
});
