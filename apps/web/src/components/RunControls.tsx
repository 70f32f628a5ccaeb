// Start, Pause (after the current step), Stop and Resume, with the status line: step, phase and ETA.
import type { Phase, RunState } from "../api.ts";
import { duration } from "../lib/format.ts";

export interface Status {
  run: string | null;
  state: RunState | "idle" | "starting";
  step: number;
  target: number;
  phase: Phase | null;
  done?: number;
  total?: number;
  etaSeconds?: number;
  pausing?: boolean;
}

const PHASE: Record<Phase, string> = {
  loading: "loading the model",
  rollouts: "rollouts",
  training: "training",
  saving: "saving",
  validating: "validating (base model vs. checkpoint)",
};
const STATE: Record<Status["state"], string> = {
  idle: "no run",
  starting: "starting",
  running: "running",
  paused: "paused",
  stopped: "stopped",
  done: "finished",
  failed: "failed",
};

export function RunControls(props: {
  status: Status;
  startBlocked: string | null;
  canResume: boolean;
  onStart: () => void;
  onPause: () => void;
  onStop: () => void;
  onResume: () => void;
}) {
  const s = props.status;
  const active = s.state === "running" || s.state === "starting";
  return (
    <section className="panel controls" aria-labelledby="controls-h">
      <h2 id="controls-h">Run</h2>
      <div className="row wrap">
        <button
          type="button"
          className="primary"
          disabled={active || !!props.startBlocked}
          onClick={props.onStart}
          title={props.startBlocked ?? undefined}
        >
          Start
        </button>
        <button type="button" disabled={!active || s.pausing} onClick={props.onPause}>
          {s.pausing ? "Pausing…" : "Pause"}
        </button>
        <button type="button" disabled={!active} onClick={props.onStop}>
          Stop
        </button>
        {props.canResume && !active && (
          <button type="button" onClick={props.onResume}>
            Resume
          </button>
        )}
      </div>
      {props.startBlocked && !active && <p className="muted small">{props.startBlocked}</p>}
      <p className="status" data-testid="status" aria-live="polite">
        {s.run ? <strong>{s.run}</strong> : "No run yet"}
        {s.run && (
          <>
            {" · "}step <span data-testid="step">{s.step}</span> / {s.target}
            {" · "}
            <span data-testid="state">{STATE[s.state]}</span>
            {active && s.phase && (
              <>
                {" · "}
                <span data-testid="phase">
                  {PHASE[s.phase]}
                  {s.phase === "rollouts" && s.total ? ` ${s.done ?? 0}/${s.total}` : ""}
                </span>
              </>
            )}
            {active && s.etaSeconds !== undefined && Number.isFinite(s.etaSeconds) && (
              <> · ETA {duration(s.etaSeconds)}</>
            )}
          </>
        )}
      </p>
      {active && s.phase === "rollouts" && s.total ? (
        <progress value={s.done ?? 0} max={s.total} aria-label="Rollouts of this step" />
      ) : null}
    </section>
  );
}
