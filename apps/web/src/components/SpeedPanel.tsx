// "Speed on this GPU": the open run's model measured in the worker (measureSpeed): the device's peak, prefill and
// decode tokens/s (batch 1 against the copy roofline), whether tensor cores are used, and start-up tuning's choices.
import { useState } from "react";
import { speedRows, type SpeedReport } from "webart/engine";

export function SpeedPanel(props: {
  run: string | null;
  /** Why it cannot measure now (a run trains), or null. */
  blocked: string | null;
  measure: (run: string) => Promise<SpeedReport>;
}) {
  const [report, setReport] = useState<SpeedReport | null>(null);
  const [state, setState] = useState<"idle" | "measuring" | { error: string }>("idle");
  const why = props.blocked ?? (props.run ? null : "open or start a run: its model is what is measured");
  const go = async () => {
    if (!props.run) return;
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
      <p className="small muted">
        Times the open run&apos;s model here, with its adapter: prefill, and decode in runs of 8 steps as rollouts
        decode free text. Requests wait while it runs (a few seconds).
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
