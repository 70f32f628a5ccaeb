// Runs as the app keeps them in IndexedDB: the engine's files (model.json, history.jsonl, checkpoints/,
// trajectories/) plus the app's own under webapp/ (settings without secrets, the environment's per-step
// metrics). Listing, history for the charts, trajectories for the viewer, deletion.
import { computeAdvantages, dec, TrajectoryGroup } from "webart/engine";
import type { GroupView, ModelChoice, RunSummary, StepRow, TrainSettings } from "../api.ts";
import { RunFiles, stepDir, type LoraConfig } from "./internals.ts";
import { store } from "./store.ts";
import { messageViews } from "../lib/messages.ts";

/** The project every browser run belongs to (runs live under `web/models/{name}/`). */
export const PROJECT = "web";

export interface RunMeta {
  version: 1;
  model: ModelChoice;
  settings: TrainSettings;
  target: number;
  lora: LoraConfig;
  createdAt: string;
  importedFrom?: string;
}

export const runFiles = (name: string) => new RunFiles(store, PROJECT, name);

/** Settings as stored: the RULER key is never written. */
export function storable(s: TrainSettings): TrainSettings {
  return s.reward.kind === "ruler" ? { ...s, reward: { ...s.reward, apiKey: "" } } : s;
}

export async function readMeta(name: string): Promise<RunMeta> {
  const meta = await runFiles(name).readJson<RunMeta>("webapp/run.json");
  if (!meta) throw new Error(`run "${name}" has no webapp/run.json (was it made outside this app?)`);
  return meta;
}

export const writeMeta = (name: string, meta: RunMeta) =>
  runFiles(name).writeJson("webapp/run.json", { ...meta, settings: storable(meta.settings) });

export async function runNames(): Promise<string[]> {
  const keys = await store.list(`${PROJECT}/models`);
  const names = new Set<string>();
  for (const k of keys) {
    const m = new RegExp(`^${PROJECT}/models/([^/]+)/webapp/run\\.json$`).exec(k);
    if (m) names.add(m[1]);
  }
  return [...names].sort();
}

export async function summary(name: string): Promise<RunSummary> {
  const f = runFiles(name);
  const meta = await readMeta(name);
  const saved = await f.readJson<{ base_model: string }>("model.json");
  const hist = await history(name);
  return {
    name,
    project: PROJECT,
    baseModel: saved?.base_model ?? "",
    model: meta.model,
    env: meta.settings.env,
    step: (await f.latestStep()) ?? 0,
    target: meta.target,
    settings: meta.settings,
    createdAt: meta.createdAt,
    lastReward: hist.length ? hist[hist.length - 1].reward : null,
    importedFrom: meta.importedFrom,
  };
}

export async function listRuns(): Promise<RunSummary[]> {
  const out: RunSummary[] = [];
  for (const n of await runNames()) out.push(await summary(n));
  return out.sort((a, b) => b.createdAt.localeCompare(a.createdAt));
}

/** The environment's metrics of a step (win rate, largest tile), kept beside the engine's history. */
export function envRow(step: number, groups: TrajectoryGroup[]): Record<string, number> {
  const ts = groups.flatMap((g) => g.trajectories);
  const mean = (k: string) => ts.reduce((s, t) => s + Number(t.metrics[k] ?? 0), 0) / Math.max(1, ts.length);
  const row: Record<string, number> = { step, win: mean("win") };
  if (ts.some((t) => "maxTile" in t.metrics)) row.maxTile = mean("maxTile");
  if (ts.some((t) => "correct" in t.metrics)) {
    row.accuracy = mean("correct");
    row.malformed = mean("malformed");
    row.turns = mean("turns");
  }
  return row;
}

export const appendEnvRow = (name: string, row: Record<string, number>) =>
  runFiles(name).store.append(runFiles(name).path("webapp/env.jsonl"), JSON.stringify(row) + "\n");

const num = (v: unknown) => (typeof v === "number" ? v : 0);

/** A chart row from a history row (the engine's "train/..." keys) and the step's environment metrics. */
export function stepRow(h: Record<string, unknown>, e?: Record<string, number>): StepRow {
  return {
    step: num(h.step),
    reward: num(h["train/reward"]),
    rewardStd: num(h["train/reward_std"]),
    loss: num(h["train/loss"]),
    policyLoss: num(h["train/policy_loss"]),
    kl: num(h["train/kl_div"]),
    entropy: num(h["train/entropy"]),
    gradNorm: num(h["train/grad_norm"]),
    tokensPerSecond: num(h["train/tokens_per_second"]),
    stepSeconds: num(h["train/step_seconds"]),
    skipped: h["train/skipped"] === true,
    win: e?.win,
    maxTile: e?.maxTile,
    accuracy: e?.accuracy,
    malformed: e?.malformed,
    turns: e?.turns,
    valBase: e?.valBase,
    valModel: e?.valModel,
  };
}

/** Per-step rows for the charts, up to the latest checkpoint. */
export async function history(name: string): Promise<StepRow[]> {
  const f = runFiles(name);
  const latest = (await f.latestStep()) ?? 0;
  const envBytes = await store.read(f.path("webapp/env.jsonl"));
  const env = new Map<number, Record<string, number>>();
  for (const l of envBytes ? dec(envBytes).split("\n") : []) if (l.trim()) env.set(JSON.parse(l).step, JSON.parse(l));
  const rows = new Map<number, StepRow>();
  for (const h of await f.history()) {
    if (typeof h.step !== "number" || h.step > latest || !("train/reward" in h)) continue;
    rows.set(h.step, stepRow(h, env.get(h.step)));
  }
  return [...rows.values()].sort((a, b) => a.step - b.step);
}

export async function trajectorySteps(name: string): Promise<number[]> {
  const f = runFiles(name);
  const latest = (await f.latestStep()) ?? 0;
  const steps = (await store.list(f.path("trajectories/train")))
    .map((k) => /\/(\d+)\.jsonl$/.exec(k)?.[1])
    .filter((s): s is string => !!s)
    .map(Number)
    .filter((s) => s <= latest);
  return steps.sort((a, b) => a - b);
}

export async function trajectories(name: string, step: number): Promise<GroupView[]> {
  const f = runFiles(name);
  const b = await store.read(f.path(`trajectories/train/${stepDir(step)}.jsonl`));
  if (!b) throw new Error(`run "${name}" has no trajectories for step ${step}`);
  const groups = dec(b)
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => TrajectoryGroup.fromJSON(JSON.parse(l)));
  // The advantages the step trained with (same scaling as the trainer's default).
  const adv = computeAdvantages(groups, true).advantages;
  return groups.map((g, gi) => ({
    exceptions: g.exceptions.map((e) => `${e.type}: ${e.message}`),
    trajectories: g.trajectories.map((t, ti) => ({
      reward: t.reward,
      advantage: adv[gi][ti],
      metrics: t.metrics,
      metadata: t.metadata,
      logs: t.logs,
      messages: messageViews(t.messagesAndChoices),
      extraHistories: t.additionalHistories.map((h) => messageViews(h.messagesAndChoices)),
    })),
  }));
}

/** Every saved group of a run (training steps, then validation), one JSON line each with its split and step. */
export async function exportTrajectories(name: string): Promise<{ fileName: string; text: string }> {
  const f = runFiles(name);
  const latest = (await f.latestStep()) ?? 0;
  const lines: string[] = [];
  for (const split of ["train", "val"]) {
    const files = (await store.list(f.path(`trajectories/${split}`)))
      .map((k) => ({ k, step: Number(/\/(\d+)\.jsonl$/.exec(k)?.[1] ?? NaN) }))
      .filter((x) => Number.isInteger(x.step) && x.step <= latest)
      .sort((a, b) => a.step - b.step);
    for (const { k, step } of files) {
      const b = await store.read(k);
      for (const l of b ? dec(b).split("\n") : [])
        if (l.trim()) lines.push(JSON.stringify({ split, step, ...JSON.parse(l) }));
    }
  }
  if (!lines.length) throw new Error(`run "${name}" has no saved trajectories yet`);
  return { fileName: `${name}-trajectories.jsonl`, text: lines.join("\n") + "\n" };
}

export async function deleteRun(name: string): Promise<void> {
  await store.remove(runFiles(name).prefix);
}
