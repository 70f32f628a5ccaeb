// "Speed on this GPU": the open run's model measured in the worker (measureSpeed): the device's peak, prefill and
// decode tokens/s (batch 1 against the copy roofline), whether tensor cores are used, and start-up tuning's choices.
import { useState } from "react";
import type { SpeedReport } from "webart/engine";

const num = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toPrecision(3));
const size = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(1)} MiB`);

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
  const b1 = r?.decode.find((d) => d.batch === 1);
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
              <tr>
                <th>device</th>
                <td>
                  {r.device}
                  {r.cpuDevice ? " (a CPU implementation)" : ""}
                </td>
              </tr>
              <tr>
                <th>peak</th>
                <td>
                  {num(r.peak.fmaGflops)} GFLOP/s FMA, {num(r.peak.copyGbps)} GB/s copy
                </td>
              </tr>
              <tr>
                <th>tensor cores</th>
                <td>
                  {r.tensorCores.on ? "on" : `off: ${r.tensorCores.why}`}
                  {!r.tensorCores.on && !r.cpuDevice && (
                    <span className="small muted">
                      {" "}
                      (Chrome offers experimental WebGPU features such as subgroup matrices behind
                      chrome://flags/#enable-unsafe-webgpu, where the GPU has them)
                    </span>
                  )}
                </td>
              </tr>
              <tr>
                <th>model</th>
                <td>
                  {r.model.name}, {r.model.layers} layers, {size(r.model.weightBytes)}
                  {r.model.adapter ? ", with its adapter" : ""}
                </td>
              </tr>
              <tr>
                <th>prefill</th>
                <td>
                  {num(r.prefill.tokensPerSec)} tokens/s ({r.prefill.tokens}-token prompt)
                </td>
              </tr>
              {r.decode.map((d) => (
                <tr key={d.batch}>
                  <th>decode, batch {d.batch}</th>
                  <td data-testid={`speed-decode-b${d.batch}`}>
                    {num(d.tokensPerSec)} tokens/s
                    {d.ofRoofline !== undefined
                      ? ` (${(100 * d.ofRoofline).toFixed(1)}% of the copy roofline)`
                      : b1
                        ? ` (${(d.tokensPerSec / b1.tokensPerSec).toFixed(1)}x batch 1)`
                        : ""}
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
