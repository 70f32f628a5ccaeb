// The app: model and settings on the left, the current run's charts, games and a play board on the right.
// All engine work happens in the worker; this component keeps the page's state and reacts to its events.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { flushSync } from "react-dom";
import type {
  DeviceInfo,
  EngineEvent,
  EnvName,
  FailureKind,
  ModelChoice,
  ModelInfo,
  RunSummary,
  StepRow,
  StorageInfo,
} from "./api.ts";
import { lineChart, rollingMean } from "webart";
import { engine, onEngineEvent } from "./engine.ts";
import { defaultDraft, KEY_STORAGE, newRunName, validate, type SettingsDraft } from "./lib/settings.ts";
import { Charts, SMOOTH } from "./components/Charts.tsx";
import { EmailPlay } from "./components/EmailPlay.tsx";
import { ChatPlay } from "./components/ChatPlay.tsx";
import { Play2048 } from "./components/Play2048.tsx";
import { GpuBanner, type Banner } from "./components/GpuBanner.tsx";
import { ModelPanel, type LoadProgress } from "./components/ModelPanel.tsx";
import { PlayBoard } from "./components/PlayBoard.tsx";
import { RolloutViewer } from "./components/RolloutViewer.tsx";
import { SpeedPanel } from "./components/SpeedPanel.tsx";
import { RunControls, type Status } from "./components/RunControls.tsx";
import { RunList } from "./components/RunList.tsx";
import { SettingsForm } from "./components/SettingsForm.tsx";
import { Tabs } from "./components/Tabs.tsx";

const IDLE: Status = { run: null, state: "idle", step: 0, target: 0, phase: null };

function failureText(kind: FailureKind, message: string, step: number): string {
  switch (kind) {
    case "device-lost":
      return (
        `${message.replace(/\.*$/, ".")} The run is paused at step ${step}, its last complete checkpoint. ` +
        `Press Resume to continue on a new device; if it happens again, close other GPU-heavy tabs, update the graphics driver, or reload the page.`
      );
    case "webgpu-missing":
      return `${message} Training needs WebGPU: use a recent Chrome or Edge over https:// or http://localhost.`;
    default:
      return message;
  }
}

/** Saves bytes or text as a file through a temporary link. */
function saveFile(data: BlobPart, fileName: string, type: string) {
  const url = URL.createObjectURL(new Blob([data], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = fileName;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** A run's chart as a standalone SVG (the CLI's chart): reward per step, its moving average, and validation. */
function chartSvg(name: string, rows: StepRow[]): string {
  const reward = rows.map((r): [number, number] => [r.step, r.reward]);
  const val = (f: (r: StepRow) => number | undefined) =>
    rows.flatMap((r): [number, number][] => (f(r) === undefined ? [] : [[r.step, f(r)!]]));
  const series = [
    { name: "reward", color: "#1f6feb", points: reward, faint: true },
    { name: `reward (mean over ${SMOOTH} steps)`, color: "#1f6feb", points: rollingMean(reward, SMOOTH) },
  ];
  if (rows.some((r) => r.valModel !== undefined))
    series.push(
      { name: "validation: base model", color: "#888888", points: val((r) => r.valBase) },
      { name: "validation: checkpoint", color: "#1d8a4e", points: val((r) => r.valModel) },
    );
  return lineChart(`${name}: reward per step (faint) and its mean over ${SMOOTH} steps`, series);
}

/** Keeps the last few notices; a step's notice replaces the previous step's, a warm start's the previous one's. */
function addNotice(list: string[], message: string): string[] {
  const kind = /^(Step|Warm start) \d+/.exec(message)?.[1];
  const kept = kind ? list.filter((n) => !new RegExp(`^${kind} \\d+`).test(n)) : list;
  return [...kept.slice(-3), message];
}

export function App() {
  const api = engine();
  const [device, setDevice] = useState<DeviceInfo>();
  const [banner, setBanner] = useState<Banner | null>(null);
  const [model, setModel] = useState<ModelChoice>({ kind: "embedded" });
  const [info, setInfo] = useState<ModelInfo | null>(null);
  const [modelError, setModelError] = useState<string | null>(null);
  const [checking, setChecking] = useState(false);
  const [progress, setProgress] = useState<LoadProgress | null>(null);
  /** The stage and file of the progress shown, "" when none: see the load event below. */
  const lastStage = useRef("");
  const clearProgress = useCallback(() => {
    lastStage.current = "";
    setProgress(null);
  }, []);
  const [draft, setDraft] = useState<SettingsDraft>(defaultDraft);
  const { settings, errors } = useMemo(() => validate(draft), [draft]);
  const [runs, setRuns] = useState<RunSummary[]>([]);
  const [status, setStatus] = useState<Status>(IDLE);
  const [rows, setRows] = useState<StepRow[]>([]);
  const [runEnv, setRunEnv] = useState<EnvName>("tictactoe");
  const [notices, setNotices] = useState<string[]>([]);
  const [storage, setStorage] = useState<StorageInfo | null>(null);
  const [version, setVersion] = useState(0);
  const [tab, setTab] = useState("charts");
  const [judgeError, setJudgeError] = useState<string | null>(null);
  const [judgeChecking, setJudgeChecking] = useState(false);
  const [compare, setCompare] = useState<string[]>([]);
  const [compareRows, setCompareRows] = useState<{ name: string; rows: StepRow[] }[]>([]);
  const current = useRef<string | null>(null);
  current.current = status.run;

  const refreshRuns = useCallback(async () => {
    setRuns(await api.listRuns());
    setStorage(await api.storage());
  }, [api]);

  useEffect(() => {
    api
      .device()
      .then(setDevice, (e: Error) =>
        setBanner({ kind: "webgpu-missing", text: failureText("webgpu-missing", e.message, 0) }),
      );
    refreshRuns().catch((e: Error) => setBanner({ kind: "other", text: `Could not read saved runs: ${e.message}` }));
  }, [api, refreshRuns]);

  useEffect(
    () =>
      onEngineEvent((e: EngineEvent) => {
        if (e.type === "load") {
          const p = { stage: e.stage, file: e.file, bytesDone: e.bytesDone, bytesTotal: e.bytesTotal };
          // The first event of each stage and file is drawn at once: a fast stage (a small model's weights) would
          // otherwise be batched with the next state and never show.
          const shown = lastStage.current;
          lastStage.current = `${e.stage}|${e.file}`;
          if (shown !== lastStage.current) flushSync(() => setProgress(p));
          else setProgress(p);
        } else if (e.type === "notice") setNotices((n) => addNotice(n, e.message));
        else if (e.run !== current.current) return;
        else if (e.type === "phase") {
          if (e.phase !== "loading") clearProgress();
          setStatus((s) => ({ ...s, phase: e.phase, done: e.done, total: e.total }));
        } else if (e.type === "step") {
          setRows((r) => [...r.filter((x) => x.step !== e.row.step), e.row]);
          setStatus((s) => ({ ...s, step: e.row.step, target: e.target, etaSeconds: e.etaSeconds }));
          setVersion((v) => v + 1);
          void refreshRuns();
        } else if (e.type === "state") {
          clearProgress();
          setStatus((s) => ({
            ...s,
            state: e.state,
            step: e.step,
            pausing: false,
            phase: e.state === "running" ? s.phase : null,
          }));
          if (e.failure && e.error)
            setBanner({ kind: e.failure, text: failureText(e.failure, e.error.message, e.step), stack: e.error.stack });
          if (e.state !== "running") void refreshRuns();
        }
      }),
    [refreshRuns, clearProgress],
  );

  // The memory plan follows the model and the settings that change it (rank, concurrent games, budget).
  const planKey = settings
    ? `${settings.loraRank}/${settings.groupSize * settings.groupsPerStep}/${settings.memoryBudgetGiB}/${settings.quantize}`
    : null;
  useEffect(() => {
    if (!device || !settings) return;
    let live = true;
    setChecking(true);
    const t = setTimeout(() => {
      api
        .inspectModel(model, settings)
        .then(
          (i) => live && (setInfo(i), setModelError(null)),
          (e: Error) => live && (setInfo(null), setModelError(e.message)),
        )
        .finally(() => live && setChecking(false));
    }, 250);
    return () => {
      live = false;
      clearTimeout(t);
    };
    // planKey stands for the settings the plan depends on, so typing in other fields does not re-plan.
  }, [api, device, model, planKey]);

  // Each env starts on its embedded model: email on webart-tools (its tokenizer and context fit tool calls), the
  // others on webart-tiny. A model the person picked (a URL, a repo, files) stays.
  useEffect(() => {
    setModel((m) => {
      if (m.kind !== "embedded") return m;
      const name = draft.env === "email" ? "webart-tools" : undefined;
      return m.name === name ? m : name ? { kind: "embedded", name } : { kind: "embedded" };
    });
  }, [draft.env]);

  // A judge refused at Start is asked again once its settings change (for the loaded model as the judge: the
  // model, and what RULER's prompt holds).
  useEffect(
    () => setJudgeError(null),
    [
      draft.rulerBaseURL,
      draft.rulerModel,
      draft.rulerApiKey,
      draft.reward,
      draft.env,
      model,
      draft.systemPrompt,
      draft.scenarioText,
      draft.rubric,
      draft.groupSize,
    ],
  );

  // The runs picked for comparison, reloaded as steps arrive.
  useEffect(() => {
    let live = true;
    Promise.all(compare.map(async (name) => ({ name, rows: await api.history(name) }))).then(
      (c) => live && setCompareRows(c),
      () => {},
    );
    return () => void (live = false);
  }, [api, compare, version]);

  const active = status.state === "running" || status.state === "starting";
  const startBlocked = !device
    ? "Training needs WebGPU (see the message above)."
    : !settings
      ? "Fix the settings marked in red."
      : modelError
        ? "The model could not be read (see Model)."
        : !info || checking
          ? "Checking the model…"
          : !info.fits
            ? "The memory plan does not fit this GPU or the memory budget (see Model)."
            : null;

  const run = async (name: string, step: number, target: number, env: EnvName, go: () => Promise<unknown>) => {
    setBanner(null);
    setNotices([]);
    setRunEnv(env);
    setStatus({ run: name, state: "starting", step, target, phase: "loading" });
    setTab("charts");
    try {
      await go();
    } catch (e) {
      setBanner({ kind: "other", text: (e as Error).message, stack: (e as Error).stack });
      setStatus((s) => ({ ...s, state: "failed", phase: null }));
    }
    await refreshRuns();
  };

  const start = async () => {
    if (!settings) return;
    if ((settings.env === "custom" && settings.reward.kind !== "env") || settings.env === "email") {
      // The judge is asked once, as a step will ask it (the loaded model: checked to hold RULER's prompt), and the
      // email agent's first turn is checked to fit the model's context, before anything is created.
      setJudgeChecking(true);
      const problem = await api.checkRun(settings, model).finally(() => setJudgeChecking(false));
      setJudgeError(problem);
      if (problem) return;
    }
    if (draft.rememberKey && draft.reward === "ruler") localStorage.setItem(KEY_STORAGE, draft.rulerApiKey);
    else localStorage.removeItem(KEY_STORAGE);
    const name = draft.name;
    setRows([]);
    setDraft((d) => ({ ...d, name: newRunName(d.env) }));
    void run(name, 0, settings.steps, settings.env, () => api.train({ name, model, settings }));
  };

  const open = async (r: RunSummary) => {
    setRunEnv(r.env);
    setStatus({
      run: r.name,
      state: r.step >= r.target ? "done" : "paused",
      step: r.step,
      target: r.target,
      phase: null,
    });
    setRows(await api.history(r.name));
    setVersion((v) => v + 1);
  };

  const resume = async (r: RunSummary) => {
    await open(r);
    const target = r.step >= r.target ? r.step + r.settings.steps : r.target;
    await run(r.name, r.step, target, r.env, () => api.resume(r.name, { apiKey: draft.rulerApiKey || undefined }));
  };

  const exportAdapter = async (r: RunSummary) => {
    try {
      const { fileName, bytes } = await api.exportAdapter(r.name);
      saveFile(bytes as Uint8Array<ArrayBuffer>, fileName, "application/zip");
    } catch (e) {
      setBanner({ kind: "other", text: `Export failed: ${(e as Error).message}`, stack: (e as Error).stack });
    }
  };

  const download = async (r: RunSummary, what: "trajectories" | "chart") => {
    try {
      if (what === "trajectories") {
        const { fileName, text } = await api.exportTrajectories(r.name);
        saveFile(text, fileName, "application/jsonl");
      } else saveFile(chartSvg(r.name, await api.history(r.name)), `${r.name}-chart.svg`, "image/svg+xml");
    } catch (e) {
      setBanner({ kind: "other", text: `Download failed: ${(e as Error).message}`, stack: (e as Error).stack });
    }
  };

  const importAdapter = async (f: File) => {
    if (!settings)
      return setBanner({ kind: "other", text: "Fix the training settings first: the imported run takes them." });
    try {
      const r = await api.importAdapter(new Uint8Array(await f.arrayBuffer()), f.name, model, settings);
      await refreshRuns();
      await open(r);
      setNotices((n) =>
        addNotice(n, `Imported ${f.name} as run ${r.name} (step 0, LoRA rank ${r.settings.loraRank}).`),
      );
    } catch (e) {
      setBanner({ kind: "other", text: `Import failed: ${(e as Error).message}`, stack: (e as Error).stack });
    }
  };

  const remove = async (r: RunSummary) => {
    try {
      await api.deleteRun(r.name);
      if (status.run === r.name) {
        setStatus(IDLE);
        setRows([]);
      }
      await refreshRuns();
    } catch (e) {
      setBanner({ kind: "other", text: `Delete failed: ${(e as Error).message}`, stack: (e as Error).stack });
    }
  };

  const pickLocal = async (files: File[] | FileSystemDirectoryHandle, label: string) => {
    setModelError(null);
    try {
      setModel(await api.addLocalModel(files, label));
    } catch (e) {
      setModelError((e as Error).message);
    } finally {
      clearProgress();
    }
  };

  const currentRun = runs.find((r) => r.name === status.run);
  return (
    <div className="app">
      <header>
        <h1>webart</h1>
        <p className="tagline">Train an LLM agent with reinforcement learning on your own GPU, in this tab.</p>
        <p className="gpu" data-testid="device">
          {device ? (
            <>
              GPU:{" "}
              <span data-testid="device-name">
                {`${device.vendor} ${device.architecture} ${device.description}`.trim()}
              </span>{" "}
              · engine in{" "}
              <span data-testid="engine-context">{device.context === "worker" ? "a Web Worker" : "the page"}</span>
            </>
          ) : banner?.kind === "webgpu-missing" ? (
            "No WebGPU"
          ) : (
            "Looking for a WebGPU device…"
          )}
        </p>
      </header>
      {banner && <GpuBanner banner={banner} onClose={() => setBanner(null)} />}
      {notices.length > 0 && (
        <ul className="notices" aria-live="polite" data-testid="notices">
          {notices.map((n, i) => (
            <li key={i}>{n}</li>
          ))}
        </ul>
      )}
      <div className="layout">
        <aside>
          <ModelPanel
            choice={model}
            info={info}
            error={modelError}
            checking={checking}
            progress={progress}
            disabled={active}
            onChoose={setModel}
            onPickLocal={pickLocal}
          />
          <SettingsForm
            draft={draft}
            errors={errors}
            disabled={active || judgeChecking}
            judgeError={judgeError}
            onChange={setDraft}
          />
          <RunControls
            status={status}
            startBlocked={startBlocked}
            canResume={!!currentRun && !active}
            onStart={() => void start()}
            onPause={() => (setStatus((s) => ({ ...s, pausing: true })), void api.pause())}
            onStop={() => void api.stop()}
            onResume={() => currentRun && void resume(currentRun)}
          />
          <RunList
            runs={runs}
            current={status.run}
            busy={active}
            storage={storage}
            onOpen={(r) => void open(r)}
            onResume={(r) => void resume(r)}
            onExport={(r) => void exportAdapter(r)}
            onDownload={(r, what) => void download(r, what)}
            compare={compare}
            onCompare={(name, on) => setCompare((c) => (on ? [...c, name] : c.filter((n) => n !== name)))}
            onDelete={(r) => void remove(r)}
            onImport={(f) => void importAdapter(f)}
          />
          <SpeedPanel
            run={status.run}
            model={info?.label ?? "the chosen model"}
            blocked={
              active
                ? "a run is training: pause it to measure speed"
                : status.run
                  ? null
                  : (startBlocked?.replace("Training needs", "Measuring needs") ?? null)
            }
            measure={(run) =>
              run
                ? api.speed(run)
                : settings
                  ? api.speedOfModel(model, settings).finally(clearProgress) // its load's progress ends with it
                  : Promise.reject(new Error("fix the settings marked in red"))
            }
          />
          <details className="panel diagnostics">
            <summary>Diagnostics</summary>
            <p className="small muted">
              Simulates what a driver reset does to a training run: the run pauses at its last checkpoint.
            </p>
            <button type="button" onClick={() => void api.loseDevice()}>
              Simulate GPU device loss
            </button>
          </details>
        </aside>
        <main>
          <Tabs
            value={tab}
            onChange={setTab}
            tabs={[
              { id: "charts", label: "Charts", content: <Charts rows={rows} env={runEnv} compare={compareRows} /> },
              {
                id: "rollouts",
                label: "Rollouts",
                content: <RolloutViewer run={status.run} env={runEnv} version={version} />,
              },
              {
                id: "play",
                label: "Play",
                content:
                  runEnv === "tictactoe" ? (
                    <PlayBoard run={status.run} maxTokens={currentRun?.settings.maxTokens ?? 12} disabled={null} />
                  ) : runEnv === "2048" ? (
                    <Play2048 run={status.run} maxTokens={currentRun?.settings.maxTokens ?? 12} />
                  ) : runEnv === "email" ? (
                    <EmailPlay run={status.run} />
                  ) : (
                    <ChatPlay
                      run={status.run}
                      systemPrompt={currentRun?.settings.custom?.systemPrompt ?? ""}
                      maxTokens={currentRun?.settings.maxTokens ?? 64}
                    />
                  ),
              },
            ]}
          />
        </main>
      </div>
    </div>
  );
}
