// "Speed on this GPU": a model measured in the worker (measureSpeed): the device's peak, prefill and decode tokens/s
// (batch 1 against the copy roofline), whether tensor cores are used, and start-up tuning's choices. With a run open,
// its model with its adapter (no training step: it would move the run's optimizer state); before any run, the base
// model chosen above with a fresh adapter, and a GRPO step timed too.
import { useState } from "react";
import { speedRows, type SpeedReport } from "webart/engine";

export function SpeedPanel(props: {
  /** The open run, measured as it is; null: the chosen base model is. */
  run: string | null;
  /** The chosen base model's label (what is measured without a run). */
  model: string;
  /** Why it cannot measure now (a run trains, the settings or the plan are refused), or null. */
  blocked: string | null;
  measure: (run: string | null) => Promise<SpeedReport>;
}) {
  const [report, setReport] = useState<SpeedReport | null>(null);
  const [state, setState] = useState<"idle" | "measuring" | { error: string }>("idle");
  const why = props.blocked;
  const go = async () => {
    setState("measuring");
    try {
      setReport(await props.measure(props.run));
      setState("idle");
    } catch (e) {
      setState({ error: (e as Error).message });
    }
  };
  const r = report;
  return (
    <section className="panel" aria-labelledby="speed-h" data-testid="speed">
      <h2 id="speed-h">Speed on this GPU</h2>
      <p className="small muted" data-testid="speed-what">
        {props.run
          ? `Times run ${props.run}'s model here, with its adapter: prefill, and decode in runs of 8 steps as rollouts decode free text. Requests wait while it runs (a few seconds).`
          : `Times ${props.model} here as a run with these settings would load it, with a fresh adapter: prefill, decode in runs of 8 steps as rollouts decode free text, and a GRPO step of 8 x 512 tokens (2 x 64 on a CPU device).`}
      </p>
      <button
        type="button"
        disabled={!!why || state === "measuring"}
        title={why ?? undefined}
        onClick={() => void go()}
      >
        {state === "measuring" ? "Measuring…" : "Measure speed"}
      </button>
      {typeof state === "object" && (
        <p className="small error" role="alert">
          {state.error}
        </p>
      )}
      {r && (
        <>
          <table className="speed" data-testid="speed-table">
            <tbody>
              {speedRows(r).map((row) => (
                <tr key={row.key}>
                  <th>{row.label}</th>
                  <td data-testid={`speed-${row.key}`}>
                    {row.text}
                    {row.key === "tensorCores" && !r.tensorCores.on && !r.cpuDevice && (
                      <span className="small muted">
                        {" "}
                        (Chrome offers experimental WebGPU features such as subgroup matrices behind
                        chrome://flags/#enable-unsafe-webgpu, where the GPU has them)
                      </span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <details>
            <summary className="small">Kernel choices ({r.kernels.length})</summary>
            <ul className="small mono">
              {r.kernels.map((k) => (
                <li key={k.key}>
                  {k.key}: {k.winner}
                </li>
              ))}
              {r.notes.map((n, i) => (
                <li key={`note-${i}`} className="muted">
                  note: {n}
                </li>
              ))}
            </ul>
          </details>
        </>
      )}
    </section>
  );
}
