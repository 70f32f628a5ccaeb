// The app end to end in Chromium (WebGPU on SwiftShader), one page kept across the tests so runs persist in
// IndexedDB as they would for a person: train, reload and resume, replay, play, export and import, RULER,
// device loss, narrow window. Screens are saved under test-results/screens/.
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, test, type Browser, type Page } from "@playwright/test";
import { unzipSync } from "fflate";
import { newTicTacToe, renderTicTacToe, stepScenarios, ticTacToeSystemPrompt } from "webart/envs";
import { readRunFile } from "./idb.ts";
import { startJudge, type Judge } from "./judge.ts";
import { serveModel } from "./model-server.ts";

test.describe.configure({ mode: "serial" });

let page: Page;
let problems: string[] = [];
let firstRun = "";

async function openPage(browser: Browser): Promise<Page> {
  const p = await (
    await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 800 } })
  ).newPage();
  p.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(`${m.type()}: ${m.text()}`);
  });
  p.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  return p;
}

const shot = (name: string) => page.screenshot({ path: `test-results/screens/${name}.png`, fullPage: true });

/** Fills the training form with tiny settings (SwiftShader on 2 cores). */
async function tiny(opts: { name: string; steps: number; reward?: "env" | "ruler" }) {
  await page.getByLabel("Run name").fill(opts.name);
  await page.getByLabel("Environment").selectOption("tictactoe");
  await page.getByLabel("Reward", { exact: true }).selectOption(opts.reward ?? "env");
  await page.getByLabel("Steps").fill(String(opts.steps));
  await page.getByLabel("Group size").fill("2");
  await page.getByLabel("Groups per step").fill("1");
  await page.getByLabel("Max tokens per move").fill("12");
  await page.getByLabel("Temperature").fill("1");
}

/** Records every text the load-progress line shows from now on (downloads and weight loading are quick here). */
async function watchProgress() {
  await page.evaluate(() => {
    const w = window as unknown as { progressSeen: string[] };
    w.progressSeen = [];
    new MutationObserver(() => {
      const t = document.querySelector('[data-testid="load-progress"]')?.textContent;
      if (t && w.progressSeen[w.progressSeen.length - 1] !== t) w.progressSeen.push(t);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
}
const progressSeen = () => page.evaluate(() => (window as unknown as { progressSeen: string[] }).progressSeen);

/** Everything the app saved in IndexedDB's "runs" store (run files, trajectories), as one text. */
const savedRuns = () =>
  page.evaluate(async () => {
    const req = indexedDB.open("webart");
    const db: IDBDatabase = await new Promise((r) => (req.onsuccess = () => r(req.result)));
    const all: unknown[] = await new Promise((r) => {
      const q = db.transaction("runs").objectStore("runs").getAll();
      q.onsuccess = () => r(q.result);
    });
    return all.map((v) => (v instanceof Uint8Array ? new TextDecoder().decode(v) : String(v))).join("\n");
  });

const step = () => page.getByTestId("step");
const state = () => page.getByTestId("state");

test.beforeAll(async ({ browser }) => {
  page = await openPage(browser);
  await page.goto("/");
});

test.beforeEach(() => {
  problems = [];
});

test("loads with no console errors, shows the device and the embedded model's memory plan", async () => {
  await page.goto("/");
  await expect(page.getByTestId("device-name")).toContainText(/swiftshader|\w+/i, { timeout: 60_000 });
  await expect(page.getByTestId("engine-context")).toHaveText("a Web Worker");
  await expect(page.getByTestId("model-info")).toContainText("webart-tiny", { timeout: 60_000 });
  await expect(page.getByTestId("plan")).toContainText("weights");
  await expect(page.getByRole("button", { name: "Start" })).toBeEnabled();
  // Validation: a bad value is refused next to its field and blocks Start.
  await page.getByLabel("Group size").fill("1");
  await expect(page.getByTestId("error-groupSize")).toContainText("between 2 and 32");
  await expect(page.getByRole("button", { name: "Start" })).toBeDisabled();
  await page.getByLabel("Group size").fill("2");
  await expect(page.getByTestId("error-groupSize")).toHaveCount(0);
  await shot("start");
  expect(problems).toEqual([]);
});

test("the memory budget setting: a plan over it is refused naming its parts, and Start waits for one that fits", async () => {
  await expect(page.getByTestId("model-info")).toContainText("webart-tiny", { timeout: 60_000 });
  await expect(page.getByLabel("GPU memory budget (GiB)")).toHaveValue("4");
  // The plan is the training step the worker's engine will plan: micro-batch, recompute, against the budget.
  await expect(page.getByTestId("plan-total")).toContainText(/of 4 GiB budget/);
  await expect(page.getByTestId("plan")).toContainText(/tokens per micro-batch, recompute (on|off)/);
  await page.getByLabel("GPU memory budget (GiB)").fill("0");
  await expect(page.getByTestId("error-memoryBudget")).toContainText("must be above 0");
  await expect(page.getByRole("button", { name: "Start" })).toBeDisabled();
  await page.getByLabel("GPU memory budget (GiB)").fill("0.01");
  const refused = page.getByTestId("plan-refused");
  await expect(refused).toContainText(/memory budget is 10\.2 MiB/, { timeout: 60_000 });
  await expect(refused).toContainText(/Largest parts: .*KV cache/);
  await expect(refused).toContainText(/weights/);
  await expect(refused).toContainText("GPU memory budget (Training settings)");
  await expect(page.getByTestId("plan-total")).toContainText("refused (0.01 GiB budget)");
  await expect(page.getByRole("button", { name: "Start" })).toBeDisabled();
  await shot("budget-refused");
  await page.getByLabel("GPU memory budget (GiB)").fill("4");
  await expect(page.getByRole("button", { name: "Start" })).toBeEnabled({ timeout: 60_000 });
  await expect(refused).toHaveCount(0);
  await expect(page.getByTestId("plan-total")).toContainText(/of 4 GiB budget/);
  expect(problems).toEqual([]);
});

test("Speed on this GPU before any run: the chosen base model, a fresh adapter, and a GRPO step within its plan", async () => {
  const panel = page.getByTestId("speed");
  await expect(panel.getByTestId("speed-what")).toContainText("Times webart-tiny (embedded) here as a run with these");
  await panel.getByRole("button", { name: "Measure speed" }).click();
  const table = panel.getByTestId("speed-table");
  await expect(table).toBeVisible({ timeout: 120_000 });
  await expect(panel.getByTestId("speed-model")).toHaveText(
    /^webart-tiny, 4 layers, [\d.]+ MiB of weights, with a LoRA adapter$/,
  );
  await expect(panel.getByTestId("speed-decode-b1")).toHaveText(/^\d[\d.]* tokens\/s in runs of 8 steps \(/);
  // The page's first load timed its kernels and kept the choices in IndexedDB.
  await expect(panel.getByTestId("speed-tuning")).toHaveText(
    /^\d+ kernel choices timed in [\d.]+ s; kept in IndexedDB webart-tune\/tables$/,
  );
  // A CPU device's short step; the planner's micro-batch and recompute, the device's peak against the plan.
  const train = panel.getByTestId("speed-train");
  await expect(train).toHaveText(
    /^[\d.]+ s for 2 x 64 tokens, \d[\d.]* tokens\/s \(micro-batches of \d+ tokens, recompute (on|off)\); peak [\d.]+ MiB, planned [\d.]+ MiB$/,
  );
  const [peak, planned] = [...(await train.innerText()).matchAll(/([\d.]+) MiB/g)].map((m) => Number(m[1]));
  expect(peak).toBeGreaterThan(0);
  expect(peak).toBeLessThanOrEqual(planned);
  await expect(panel.getByRole("button", { name: "Measure speed" })).toBeEnabled();
  await expect(page.getByTestId("load-progress")).toHaveCount(0); // the check's load does not stay on show
  // Bad settings block it, as they block Start.
  await page.getByLabel("Group size").fill("1");
  await expect(panel.getByRole("button", { name: "Measure speed" })).toBeDisabled();
  await page.getByLabel("Group size").fill("2");
  await expect(panel.getByRole("button", { name: "Measure speed" })).toBeEnabled({ timeout: 60_000 });
  await shot("speed-before-run");
  // With 4-bit base weights, quantized on this GPU as they load: fewer bytes, and the step still within its plan.
  const mib = async (id: string) => [...(await panel.getByTestId(id).innerText()).matchAll(/([\d.]+) MiB/g)];
  const full = Number((await mib("speed-model"))[0][1]);
  await page.getByTestId("q4").check();
  await panel.getByRole("button", { name: "Measure speed" }).click();
  await expect(panel.getByTestId("speed-model")).toHaveText(
    /^webart-tiny, 4 layers, [\d.]+ MiB of weights \(q4\), with a LoRA adapter$/,
    { timeout: 120_000 },
  );
  expect(Number((await mib("speed-model"))[0][1])).toBeLessThan(full / 3);
  const [peakQ4, plannedQ4] = (await mib("speed-train")).map((m) => Number(m[1]));
  expect(peakQ4).toBeGreaterThan(0);
  expect(peakQ4).toBeLessThanOrEqual(plannedQ4);
  await page.getByTestId("q4").uncheck();
  expect(problems).toEqual([]);
});

/** The start-up tuning table the engine's load in the worker saved in IndexedDB (engine/src/tune-cache.ts), if any. */
let savedTuning:
  | { kernels: string; build?: string; table: Record<string, { winner: string; ms: Record<string, number> }> }
  | undefined;
const readSavedTuning = () =>
  page.evaluate(
    () =>
      new Promise<typeof savedTuning>((resolve, reject) => {
        const open = indexedDB.open("webart-tune");
        open.onerror = () => reject(open.error);
        open.onsuccess = () => {
          const db = open.result;
          if (!db.objectStoreNames.contains("tables")) return resolve(undefined);
          const get = db.transaction("tables").objectStore("tables").get("table");
          get.onsuccess = () => resolve(get.result);
          get.onerror = () => reject(get.error);
        };
      }),
  );

test("trains tic-tac-toe for 2 steps: the step counter reaches 2 and the reward chart has 2 points", async () => {
  firstRun = `ttt-e2e-${Date.now().toString(36)}`;
  await tiny({ name: firstRun, steps: 2 });
  // The page must not block while the worker trains: a 20 ms timer on the page keeps firing on time.
  await page.evaluate(() => {
    const w = window as unknown as { lag: number; lagTimer: number };
    let last = performance.now();
    w.lag = 0;
    w.lagTimer = window.setInterval(() => {
      const now = performance.now();
      w.lag = Math.max(w.lag, now - last - 20);
      last = now;
    }, 20);
  });
  await page.getByRole("button", { name: "Start" }).click();
  await expect(state()).toHaveText("running", { timeout: 60_000 });
  await expect(state()).toHaveText("finished", { timeout: 120_000 });
  const lag = await page.evaluate(() => {
    const w = window as unknown as { lag: number; lagTimer: number };
    clearInterval(w.lagTimer);
    return w.lag;
  });
  console.log(`longest main-thread stall while training: ${lag.toFixed(0)} ms`);
  expect(lag).toBeLessThan(500); // a machine shared by other jobs adds scheduling noise; a blocking step would be seconds
  await expect(step()).toHaveText("2");
  await expect(page.getByTestId("chart-reward")).toHaveAttribute("data-points", "2");
  await expect(page.getByTestId("chart-reward").locator("circle.pt")).toHaveCount(2);
  await expect(page.getByTestId(`run-${firstRun}`).getByTestId("run-step")).toHaveText("2");
  await shot("charts");
  // Loading the model measured the kernels' variants on this device and saved the table for later visits.
  savedTuning = await readSavedTuning();
  expect(savedTuning?.kernels).toMatch(/^[0-9a-f]{16}$/);
  // Saved for this browser: another version of it measures again.
  expect(savedTuning?.build).toBe(await page.evaluate(() => navigator.userAgent));
  // Keys are device | op@shape: each measured on this model's shapes.
  const keys = Object.keys(savedTuning?.table ?? {}).map((k) => k.split("|").pop()!.split("@")[0]);
  expect(keys).toEqual(expect.arrayContaining(["matmul.nt.f32", "sample.threads", "attention.train", "lora.layout"]));
  expect(problems).toEqual([]);
});

test("the tab played the scenarios Node draws from the same seed (one scenario formula for both)", async () => {
  type Saved = { trajectories: { metadata: { seed: number }; messages_and_choices: { content?: string }[] }[] };
  const groups = await readRunFile(page, `web/models/${firstRun}/trajectories/train/0001.jsonl`);
  const saved = groups
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Saved);
  // The form's defaults (seed 1) with tiny()'s 1 group of 2: step 0's scenarios, as webart train would draw them.
  const expected = stepScenarios(0, { seed: 1, groupsPerStep: 1, groupSize: 2 });
  expect(saved.map((g) => g.trajectories.map((t) => t.metadata.seed))).toEqual(
    expected.map((g) => g.map((s) => s.seed)),
  );
  for (const t of saved.flatMap((g) => g.trajectories)) {
    const game = newTicTacToe({ seed: t.metadata.seed });
    expect(t.messages_and_choices[0].content).toBe(ticTacToeSystemPrompt(game.agent));
    expect(t.messages_and_choices[1].content).toBe(renderTicTacToe(game.board));
  }
});

test("after a reload the run is listed with its charts; Resume continues from step 2", async () => {
  await page.reload();
  const item = page.getByTestId(`run-${firstRun}`);
  await expect(item.getByTestId("run-step")).toHaveText("2", { timeout: 60_000 });
  await item.getByRole("button", { name: `Open ${firstRun}` }).click();
  await expect(page.getByTestId("chart-reward")).toHaveAttribute("data-points", "2");
  await item.getByRole("button", { name: `Resume ${firstRun}` }).click();
  // It starts from the saved step, not from 0, and trains on: a finished run is extended by its step count.
  await expect(step()).toHaveText("2");
  await expect(page.getByTestId("status")).toContainText("/ 4");
  await expect(state()).toHaveText("finished", { timeout: 240_000 });
  await expect(step()).toHaveText("4");
  await expect(page.getByTestId("chart-reward")).toHaveAttribute("data-points", "4");
  // The reloaded page took the saved tuning instead of measuring again (new timings would differ).
  expect(await readSavedTuning()).toEqual(savedTuning);
  expect(problems).toEqual([]);
});

test("the rollout viewer replays a trajectory move by move beside the conversation", async () => {
  await page.getByRole("tab", { name: "Rollouts" }).click();
  await page.getByLabel("Step", { exact: true }).selectOption("2");
  await expect(page.getByTestId("traj-meta")).toContainText("Reward");
  await expect(page.getByTestId("traj-meta")).toContainText("advantage");
  const counter = page.getByTestId("move-counter");
  await expect(counter).toHaveText(/^1 \/ \d+$/);
  const total = Number((await counter.textContent())!.split("/")[1]);
  expect(total).toBeGreaterThanOrEqual(2); // the first board and the final position at least
  await expect(page.getByRole("grid", { name: "Board at move 1" })).toBeVisible();
  await expect(page.locator(".msg.current")).toHaveCount(2); // the board the model saw and its reply
  await page.getByRole("button", { name: "Next move" }).click();
  await expect(counter).toHaveText(`2 / ${total}`);
  await expect(page.getByRole("grid", { name: "Board at move 2" })).toBeVisible();
  await shot("rollouts");
  expect(problems).toEqual([]);
});

test("the play board takes a person's move and the model answers with a legal move or a visible invalid-move message", async () => {
  await page.getByRole("tab", { name: "Play" }).click();
  await page.getByRole("button", { name: "New game: I play x (first)" }).click();
  await page.getByRole("gridcell", { name: "B2 empty" }).click();
  await expect(page.getByRole("gridcell", { name: "B2 x" })).toBeVisible();
  const msg = page.getByTestId("play-message");
  await expect(msg).toHaveText(/The model played [ABC][123]\.|Invalid move from the model/, { timeout: 60_000 });
  const text = (await msg.textContent())!;
  if (text.startsWith("The model played")) {
    const cell = /played ([ABC][123])/.exec(text)![1];
    await expect(page.getByRole("gridcell", { name: `${cell} o` })).toBeVisible();
  } else {
    await expect(msg).toHaveClass(/error/);
    await expect(page.getByTestId("play-over")).toContainText("invalid move");
  }
  await expect(page.getByTestId("model-reply")).toBeVisible();
  await shot("play");
  expect(problems).toEqual([]);
});

test("Speed on this GPU times the open run's model in the worker: peak, prefill, decode against the roofline", async () => {
  const panel = page.getByTestId("speed");
  await expect(panel.getByTestId("speed-what")).toContainText(`Times run ${firstRun}'s model here, with its adapter`);
  await panel.getByRole("button", { name: "Measure speed" }).click();
  const table = panel.getByTestId("speed-table");
  await expect(table).toBeVisible({ timeout: 120_000 });
  await expect(table).toContainText("swiftshader");
  await expect(panel.getByTestId("speed-peak")).toHaveText(
    /^\d[\d.]* GFLOP\/s FMA, \d[\d.]* GB\/s copy \(measured now\)$/,
  );
  await expect(panel.getByTestId("speed-tensorCores")).toContainText(
    "off: this device offers no f16 subgroup matrices",
  );
  await expect(panel.getByTestId("speed-model")).toHaveText(
    /^webart-tiny, 4 layers, [\d.]+ MiB of weights, with a LoRA adapter$/,
  );
  await expect(panel.getByTestId("speed-prefill")).toHaveText(/^\d[\d.]* tokens\/s \(one prompt of 64 tokens\)$/);
  await expect(panel.getByTestId("speed-decode-b1")).toHaveText(
    /^\d[\d.]* tokens\/s in runs of 8 steps \([\d.]+% of the copy roofline: every weight read once a token\)$/,
  );
  // The other batch: 8, or as many sequences as the engine's KV slots hold.
  const rows = panel.locator('[data-testid^="speed-decode-b"]');
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(1)).toHaveText(/^\d[\d.]* tokens\/s in runs of 8 steps \([\d.]+x batch 1\)$/);
  await expect(panel.getByText(/^Kernel choices \(\d+\)$/)).toBeVisible();
  // Loaded after the page was reloaded: its choices came back from IndexedDB.
  await expect(panel.getByTestId("speed-tuning")).toHaveText(/read back in [\d.]+ s.* IndexedDB webart-tune\/tables$/);
  await expect(panel.getByRole("button", { name: "Measure speed" })).toBeEnabled();
  await shot("speed");
  expect(problems).toEqual([]);
});

test("export downloads a PEFT zip; importing it back makes a run with the same adapter that plays", async () => {
  const item = page.getByTestId(`run-${firstRun}`);
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    item.getByRole("button", { name: `Export adapter of ${firstRun}` }).click(),
  ]);
  expect(download.suggestedFilename()).toBe(`${firstRun}-step0004.zip`);
  const zipPath = test.info().outputPath("adapter.zip");
  await download.saveAs(zipPath);
  const files = unzipSync(new Uint8Array(readFileSync(zipPath)));
  const names = Object.keys(files).sort();
  expect(names).toEqual([`${firstRun}-step0004/adapter_config.json`, `${firstRun}-step0004/adapter_model.safetensors`]);
  const config = JSON.parse(new TextDecoder().decode(files[names[0]]));
  expect(config).toMatchObject({ peft_type: "LORA", r: 8, lora_alpha: 16 });
  const weights = files[names[1]];
  // safetensors: an 8-byte header length, then JSON naming PEFT's tensors.
  const headerLen = Number(new DataView(weights.buffer, weights.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(weights.subarray(8, 8 + headerLen)));
  expect(Object.keys(header)).toContain("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");

  await page
    .getByLabel("Import PEFT adapter zip")
    .setInputFiles({ name: "my-adapter.zip", mimeType: "application/zip", buffer: readFileSync(zipPath) });
  const imported = page.getByTestId("run-my-adapter");
  await expect(imported).toContainText("imported", { timeout: 60_000 });
  await expect(imported.getByTestId("run-step")).toHaveText("0");
  const [again] = await Promise.all([
    page.waitForEvent("download"),
    imported.getByRole("button", { name: "Export adapter of my-adapter" }).click(),
  ]);
  const againPath = test.info().outputPath("again.zip");
  await again.saveAs(againPath);
  const back = unzipSync(new Uint8Array(readFileSync(againPath)));
  expect(Buffer.from(back["my-adapter-step0000/adapter_model.safetensors"]).equals(Buffer.from(weights))).toBe(true);
  // The imported adapter loads into the engine: the model plays with it.
  await page.getByRole("tab", { name: "Play" }).click();
  await expect(page.getByText("Playing against my-adapter")).toBeVisible();
  await page.getByRole("button", { name: "New game: I play o" }).click();
  await expect(page.getByTestId("play-message")).toHaveText(
    /The model played [ABC][123]\.|Invalid move from the model/,
    { timeout: 60_000 },
  );
  // A zip that is not an adapter is refused with the reason.
  await page
    .getByLabel("Import PEFT adapter zip")
    .setInputFiles({ name: "nothing.zip", mimeType: "application/zip", buffer: Buffer.from("not a zip") });
  await expect(page.getByTestId("banner-other")).toContainText("Import failed: nothing.zip: not a readable zip");
  // The error crossed the worker boundary with its stack (frames in the worker's script).
  await page.getByTestId("banner-other").getByText("Details").click();
  await expect(page.getByTestId("banner-other").locator("pre")).toContainText(/worker-[\w-]+\.js/);
  await page.getByRole("button", { name: "Dismiss message" }).click();
  expect(problems).toEqual([]);
});

test("RULER reward: a judge behind an OpenAI-compatible endpoint scores each group and the step trains on it", async () => {
  const judge: Judge = await startJudge();
  try {
    await page.getByRole("tab", { name: "Charts" }).click();
    await tiny({ name: "ruler-e2e", steps: 1, reward: "ruler" });
    // The embedded model plays almost deterministically at temperature 1; at 2, among a group of 6 games some
    // differ, and the judge sees each distinct one once (identical trajectories are judged once).
    await page.getByLabel("Temperature").fill("2");
    await page.getByLabel("Group size").fill("6");
    await page.getByLabel("Judge base URL").fill(judge.baseURL);
    await page.getByLabel("Judge model").fill("judge-1");
    await page.getByLabel("API key").fill("sk-test-e2e-key");
    await page.getByRole("button", { name: "Start" }).click();
    await expect(state()).toHaveText("finished", { timeout: 120_000 });
    expect(judge.requests.length).toBe(1);
    expect(judge.requests[0]).toMatchObject({ model: "judge-1", authorization: "Bearer sk-test-e2e-key" });
    const ids = judge.requests[0].ids;
    expect(ids.length).toBeGreaterThanOrEqual(2);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => /^[1-6]$/.test(id))).toBe(true);
    // Different scores in the group: a real update (non-zero gradient), not a skipped step.
    const gradNorm = Number(await page.getByTestId("chart-gradnorm").locator(".chart-last").textContent());
    expect(gradNorm).toBeGreaterThan(0);
    await page.getByRole("tab", { name: "Rollouts" }).click();
    await expect(page.locator(".ruler-note")).toContainText("RULER score");
    // The key stays in memory: it is in no saved run.
    const saved = await savedRuns();
    expect(saved).toContain("judge-1");
    expect(saved).not.toContain("sk-test-e2e-key");
    await shot("ruler");
    expect(problems).toEqual([]);
  } finally {
    await judge.close();
    await page.getByLabel("Reward", { exact: true }).selectOption("env");
  }
});

test("a GPU device lost mid-training leaves the run paused at its last checkpoint, and Resume continues", async () => {
  await page.getByRole("tab", { name: "Charts" }).click();
  await tiny({ name: "lost-e2e", steps: 50 });
  await page.getByRole("button", { name: "Start" }).click();
  await expect(step()).toHaveText(/^[1-9]\d*$/, { timeout: 120_000 });
  await page.getByText("Diagnostics").click();
  await page.getByRole("button", { name: "Simulate GPU device loss" }).click();
  await expect(page.getByTestId("banner-device-lost")).toContainText("paused at step", { timeout: 60_000 });
  await expect(state()).toHaveText("paused");
  const saved = (await step().textContent())!;
  await expect(page.getByTestId("run-lost-e2e").getByTestId("run-step")).toHaveText(saved);
  await shot("device-lost");
  await page.getByRole("button", { name: "Resume lost-e2e" }).click();
  // Steps can pass faster than the page is polled: wait until the counter has moved past the checkpoint.
  await expect
    .poll(async () => Number(await step().textContent()), { timeout: 120_000 })
    .toBeGreaterThan(Number(saved));
  await page.getByRole("button", { name: "Stop" }).click();
  await expect(state()).toHaveText("stopped", { timeout: 120_000 });
  // Destroying the device is not normal use; its console errors are expected here.
});

test("a full disk pauses the run at its last checkpoint, losing nothing; Resume continues once there is room", async () => {
  const cdp = await page.context().newCDPSession(page);
  const origin = new URL(page.url()).origin;
  // Chromium enforces an overridden quota on writes (estimate() keeps reporting the disk's), so the step's
  // checkpoint write is what fails here: the run must stay at its last complete checkpoint.
  await cdp.send("Storage.overrideQuotaForOrigin", { origin, quotaSize: 1 });
  // IndexedDB's bucket context lets writes through without asking the quota manager for up to 30 s after its last
  // answer (Chromium's BucketContext::kBucketSpaceCacheTimeLimit). A fast run once finished all its steps inside that
  // window, so no write failed: wait it out, so the first checkpoint written after Resume meets the new quota.
  test.setTimeout(300_000);
  await page.waitForTimeout(31_000);
  const atStart = Number(await page.getByTestId("run-lost-e2e").getByTestId("run-step").textContent());
  try {
    await page.getByRole("button", { name: "Resume lost-e2e" }).click();
    await expect(page.getByTestId("banner-storage-full"))
      .toContainText("Nothing already saved is lost", { timeout: 60_000 })
      .catch(async (e: Error) => {
        // Say what the page showed instead (a CI run once timed out here with no banner).
        const seen = {
          state: await state().textContent(),
          step: await step().textContent(),
          banners: await page.locator(".banner").allTextContents(),
          atStart,
        };
        throw new Error(`${e.message}\nthe page showed: ${JSON.stringify(seen)}`);
      });
    await expect(state()).toHaveText("paused");
    const saved = (await step().textContent())!;
    expect(Number(saved)).toBeGreaterThanOrEqual(atStart);
    await expect(page.getByTestId("run-lost-e2e").getByTestId("run-step")).toHaveText(saved);
    await shot("storage-full");
  } finally {
    await cdp.send("Storage.overrideQuotaForOrigin", { origin });
  }
  const before = Number(await step().textContent());
  await page.getByRole("button", { name: "Resume lost-e2e" }).click();
  await expect.poll(async () => Number(await step().textContent()), { timeout: 120_000 }).toBeGreaterThan(before);
  // Pause, unless the run reaches its last step first (it has few left; a CI run once finished before the click
  // landed): either way it stops on a saved step.
  await page
    .getByRole("button", { name: "Pause" })
    .click({ timeout: 10_000 })
    .catch(() => undefined);
  await expect(state()).toHaveText(/^(paused|finished)$/, { timeout: 120_000 });
  expect(problems).toEqual([]);
});

test("a model from a URL: its plan before loading, download progress, and a cached copy for the next visit", async () => {
  const server = await serveModel(fileURLToPath(new URL("../models/webart-tiny/", import.meta.url)));
  try {
    await page.getByLabel("Model URL").fill(server.url);
    await page.getByRole("button", { name: "Use URL" }).click();
    await expect(page.getByTestId("model-info")).toContainText(server.url.replace(/\/$/, ""), { timeout: 60_000 });
    await expect(page.getByTestId("plan")).toContainText("kv cache");
    await tiny({ name: "url-e2e", steps: 1 });
    await watchProgress();
    await page.getByRole("button", { name: "Start" }).click();
    await expect(state()).toHaveText("finished", { timeout: 120_000 });
    expect(server.hits.filter((h) => h.endsWith("/model.safetensors"))).toHaveLength(1);
    const seen = await progressSeen();
    expect(seen.some((t) => /^Downloading model\.safetensors: .+ \/ [\d.]+ [KM]iB$/.test(t))).toBe(true);
    expect(seen.some((t) => /^Loading weights .+: .+ \/ [\d.]+ [KM]iB$/.test(t))).toBe(true);
  } finally {
    await server.close();
  }
  // The host is gone: after a reload the run resumes from the browser's copy of the model.
  await page.reload();
  await page.getByRole("button", { name: "Resume url-e2e" }).click();
  await expect(step()).toHaveText("2", { timeout: 120_000 });
  await expect(state()).toHaveText("finished", { timeout: 120_000 });
  await page.getByLabel("webart-tiny, embedded (ships with the app)").check();
  expect(problems).toEqual([]);
});

test("a Hugging Face repo id: files come from the hub once, then from the browser's cache", async () => {
  // The hub, stood in for by Playwright's network interception (this machine is offline): the real resolve URLs.
  const hits: string[] = [];
  let online = true;
  await page.context().route("https://huggingface.co/**", (route) => {
    const path = new URL(route.request().url()).pathname;
    hits.push(path);
    const m = /^\/test-org\/tiny\/resolve\/main\/([\w.-]+)$/.exec(path);
    const file = m ? fileURLToPath(new URL(`../models/webart-tiny/${m[1]}`, import.meta.url)) : "";
    if (!online) return route.abort("internetdisconnected");
    if (!file || !existsSync(file))
      return route.fulfill({ status: 404, body: "", headers: { "access-control-allow-origin": "*" } });
    return route.fulfill({ status: 200, body: readFileSync(file), headers: { "access-control-allow-origin": "*" } });
  });
  try {
    await page.getByLabel("Hugging Face repo id").fill("test-org/tiny");
    await page.getByRole("button", { name: "Use repo" }).click();
    await expect(page.getByTestId("model-info")).toContainText("test-org/tiny", { timeout: 60_000 });
    await tiny({ name: "hub-e2e", steps: 1 });
    await page.getByRole("button", { name: "Start" }).click();
    await expect(state()).toHaveText("finished", { timeout: 120_000 });
    expect(hits.filter((h) => h.endsWith("/model.safetensors"))).toHaveLength(1);
    online = false;
    await page.reload();
    await page.getByRole("button", { name: "Resume hub-e2e" }).click();
    await expect(step()).toHaveText("2", { timeout: 120_000 });
    await expect(state()).toHaveText("finished", { timeout: 120_000 });
    expect(hits.filter((h) => h.endsWith("/model.safetensors"))).toHaveLength(1);
  } finally {
    await page.context().unroute("https://huggingface.co/**");
    await page.getByLabel("webart-tiny, embedded (ships with the app)").check();
  }
  expect(problems).toEqual([]);
});

test("a model folder from this computer is copied into the model cache; a model that cannot fit is refused", async () => {
  await page.getByLabel("Model folder").setInputFiles(fileURLToPath(new URL("../models/webart-tiny", import.meta.url)));
  await expect(page.getByTestId("model-info")).toContainText("webart-tiny:", { timeout: 60_000 });
  await expect(page.getByTestId("plan")).toContainText("weights");
  await expect(page.getByRole("button", { name: "Start" })).toBeEnabled();
  // Only config.json is read before loading: a config with 4 GiB matrices is refused with the reason.
  const config = JSON.parse(readFileSync(new URL("../models/webart-tiny/config.json", import.meta.url), "utf8"));
  const huge = {
    ...config,
    hidden_size: 16384,
    intermediate_size: 65536,
    num_attention_heads: 128,
    num_key_value_heads: 8,
    head_dim: 128,
  };
  await page
    .getByLabel("Model files")
    .setInputFiles([{ name: "config.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(huge)) }]);
  await expect(page.getByTestId("plan-refused")).toContainText("exceeds the device's", { timeout: 60_000 });
  await expect(page.getByRole("button", { name: "Start" })).toBeDisabled();
  await shot("plan-refused");
  await page.getByLabel("webart-tiny, embedded (ships with the app)").check();
  await expect(page.getByRole("button", { name: "Start" })).toBeEnabled({ timeout: 60_000 });
  expect(problems).toEqual([]);
});

test("2048: a step trains and the viewer draws the tiles", async () => {
  await tiny({ name: "g2048-e2e", steps: 1 });
  await page.getByLabel("Environment").selectOption("2048");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(state()).toHaveText("finished", { timeout: 120_000 });
  await expect(page.getByTestId("chart-maxtile")).toHaveAttribute("data-points", "1");
  await page.getByRole("tab", { name: "Rollouts" }).click();
  await expect(page.locator(".b2048 .tile")).toHaveCount(16);
  await expect(page.locator(".b2048 .tile:not(:empty)")).not.toHaveCount(0); // two spawned tiles at least
  await shot("rollouts-2048");
  await page.getByLabel("Environment").selectOption("tictactoe");
  expect(problems).toEqual([]);
});

test("email search: the env picks webart-tools; webart-tiny is refused by name; webart-tools trains 2 steps, and Play asks it about an inbox", async () => {
  await tiny({ name: "email-tiny-e2e", steps: 1 });
  await page.getByLabel("Environment").selectOption("email");
  await expect(page.getByLabel("Max tokens per move")).toHaveValue("200");
  // The env starts on its own embedded model, whose tokenizer and context fit the tools.
  const tools = page.getByLabel("webart-tools, embedded (the email agent's: tool calls, a 2048-token context)");
  await expect(tools).toBeChecked();
  // webart-tiny's 1024 tokens do not hold the three tools' definitions: refused before anything starts.
  await page.getByLabel("webart-tiny, embedded (ships with the app)").check();
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page.getByTestId("error-judge")).toContainText(
    /cannot play the email agent here: .* takes \d+ tokens .* beyond the 1024-token context/,
  );
  await expect(page.getByTestId("run-email-tiny-e2e")).toHaveCount(0); // nothing was created
  await tools.check();
  await expect(page.getByTestId("model-info")).toContainText("webart-tools", { timeout: 60_000 });
  await tiny({ name: "email-e2e", steps: 2 });
  await page.getByLabel("Environment").selectOption("email");
  await expect(tools).toBeChecked();
  // The env's defaults: every turn a call whose values the episode has shown (guided), rollouts at 1.5, more
  // groups drawn while fewer vary (none here: one group of two, so that two steps stay short).
  await expect(page.getByLabel("Tool calls", { exact: true })).toHaveValue("guided");
  await expect(page.getByLabel("Temperature")).toHaveValue("1.5");
  await expect(page.getByLabel("Most groups drawn a step (games)")).toHaveValue("12");
  // 30% of the answers after a read are a random sentence of that email, asked as a forced call.
  await expect(page.getByLabel("Exploration")).toHaveValue("0.3");
  await page.getByLabel("Most groups drawn a step (games)").fill("");
  await page.getByRole("button", { name: "Start" }).click();
  // (The check of the model's context runs first; until it is done the status still shows the last run.)
  await expect(page.getByTestId("status")).toContainText("email-e2e", { timeout: 60_000 });
  await expect(state()).toHaveText("finished", { timeout: 300_000 });
  await expect(step()).toHaveText("2");
  await expect(page.getByTestId("chart-accuracy")).toHaveAttribute("data-points", "2");
  // The episode as the model saw it: its question, then its tool calls with their arguments.
  await page.getByRole("tab", { name: "Rollouts" }).click();
  const conversation = page.getByRole("list", { name: "Conversation" });
  await expect(conversation.locator(".msg.user")).toContainText("?");
  await expect(conversation.locator(".msg.assistant")).not.toHaveCount(0);
  // Forced calls: each of the model's turns is one tool call.
  const turns = await conversation.locator(".msg.assistant").count();
  await expect(conversation.locator(".msg.assistant [data-testid=tool-call]")).toHaveCount(turns);
  await shot("rollouts-email");
  // Play: a held-out inbox and its own question; the checkpoint and the base model each play an episode.
  await page.getByRole("tab", { name: "Play" }).click();
  await expect(page.getByTestId("inbox").locator(":scope > li")).not.toHaveCount(0);
  const question = await page.getByLabel("Question").inputValue();
  expect(question).toMatch(/\?$/);
  await page.getByRole("button", { name: "Ask" }).click();
  await expect(page.getByTestId("email-outcome-model")).toContainText(/\d+ turns?/, { timeout: 120_000 });
  await expect(page.getByTestId("email-outcome-base")).toContainText(/\d+ turns?/, { timeout: 120_000 });
  await expect(page.getByTestId("email-model").locator(".msg.user")).toContainText(question);
  await shot("play-email");
  // Back to tic-tac-toe: the env's own model again.
  await page.getByLabel("Environment").selectOption("tictactoe");
  await expect(page.getByLabel("webart-tiny, embedded (ships with the app)")).toBeChecked();
  expect(problems).toEqual([]);
});

test("tic-tac-toe moves among the legal ones: each is asked with a guided_choice, and its choice keeps the sets", async () => {
  await page.getByRole("tab", { name: "Charts" }).click();
  await tiny({ name: "legal-e2e", steps: 1 });
  const legal = page.getByLabel(/Training moves among the legal ones/);
  await legal.check();
  try {
    await page.getByRole("button", { name: "Start" }).click();
    await expect(page.getByTestId("status")).toContainText("legal-e2e", { timeout: 60_000 });
    await expect(state()).toHaveText("finished", { timeout: 120_000 });
    await expect(step()).toHaveText("1");
  } finally {
    await legal.uncheck();
  }
  // The saved trajectories hold the sets each move's tokens were drawn from (what the step trained them over).
  const saved = await savedRuns();
  expect(saved).toContain('"legalMoves":true');
  expect(saved).toContain('"token_allowed"');
  expect(problems).toEqual([]);
});

test("Delete asks once more, then removes the run and every file of it", async () => {
  const item = page.getByTestId("run-my-adapter");
  await item.getByRole("button", { name: "Delete my-adapter" }).click();
  await item.getByRole("button", { name: "Keep" }).click();
  await expect(item).toBeVisible();
  await item.getByRole("button", { name: "Delete my-adapter" }).click();
  await item.getByRole("button", { name: "Confirm deleting my-adapter" }).click();
  await expect(item).toHaveCount(0);
  const keys = await page.evaluate(async () => {
    const req = indexedDB.open("webart");
    const db: IDBDatabase = await new Promise((r) => (req.onsuccess = () => r(req.result)));
    return new Promise<string[]>((r) => {
      const q = db.transaction("runs").objectStore("runs").getAllKeys();
      q.onsuccess = () => r(q.result.map(String));
    });
  });
  expect(keys.filter((k) => k.startsWith("web/models/my-adapter/"))).toEqual([]);
  expect(keys.some((k) => k.startsWith(`web/models/${firstRun}/`))).toBe(true);
  await page.reload();
  await expect(page.getByTestId(`run-${firstRun}`)).toBeVisible({ timeout: 60_000 });
  await expect(page.getByTestId("run-my-adapter")).toHaveCount(0);
  expect(problems).toEqual([]);
});

test("usable on a narrow window: one column, nothing wider than the screen", async () => {
  await page.setViewportSize({ width: 400, height: 860 });
  await page.getByRole("tab", { name: "Charts" }).click();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow).toBeLessThanOrEqual(0);
  await shot("narrow");
  // Keyboard: the tabs move with the arrow keys.
  await page.getByRole("tab", { name: "Charts" }).focus();
  await page.keyboard.press("ArrowRight");
  await expect(page.getByRole("tab", { name: "Rollouts" })).toHaveAttribute("aria-selected", "true");
  await page.setViewportSize({ width: 1280, height: 800 });
  expect(problems).toEqual([]);
});
