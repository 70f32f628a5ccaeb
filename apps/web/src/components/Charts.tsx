// The training charts, one per metric, redrawn as each step's row arrives: noisy per-step values faint under their
// moving average, the custom task's validation (base model against the checkpoint), and saved runs compared.
import type { EnvName, StepRow } from "../api.ts";
import { LineChart, smoothed } from "./LineChart.tsx";

/** Steps in the moving average, as the CLI's chart draws it. */
export const SMOOTH = 10;
const PALETTE = ["#2f6fdd", "#c56a00", "#1d8a4e", "#b03050", "#7a3fc0", "#2f8f9d"];

export function Charts(props: { rows: StepRow[]; env: EnvName; compare?: { name: string; rows: StepRow[] }[] }) {
  const r = props.rows;
  const series = (f: (s: StepRow) => number | undefined, rows = r) =>
    rows.flatMap((s) => (f(s) === undefined ? [] : [{ x: s.step, y: f(s)! }]));
  const compare = props.compare ?? [];
  return (
    <section aria-label="Training charts" className="charts">
      {compare.length >= 2 && (
        <LineChart
          id="compare"
          title={`Reward, runs compared (mean over ${SMOOTH} steps)`}
          lines={compare.map((c, i) => ({
            name: c.name,
            color: PALETTE[i % PALETTE.length],
            points: smoothed(
              series((s) => s.reward, c.rows),
              SMOOTH,
            ),
          }))}
        />
      )}
      <LineChart
        id="reward"
        title="Reward (mean ± std)"
        smooth={SMOOTH}
        points={r.map((s) => ({ x: s.step, y: s.reward, lo: s.reward - s.rewardStd, hi: s.reward + s.rewardStd }))}
      />
      {props.env === "custom" ? (
        <LineChart
          id="val"
          title="Validation: judge's score"
          lines={[
            { name: "base model", color: "#888", points: series((s) => s.valBase) },
            { name: "checkpoint", color: "#1d8a4e", points: series((s) => s.valModel) },
          ]}
        />
      ) : props.env === "email" ? (
        <>
          <LineChart
            id="accuracy"
            title="Answer accuracy"
            smooth={SMOOTH}
            points={series((s) => s.accuracy)}
            color="#1d8a4e"
          />
          <LineChart
            id="malformed"
            title="Episodes ended by a malformed reply"
            smooth={SMOOTH}
            points={series((s) => s.malformed)}
            color="#b03050"
          />
        </>
      ) : props.env === "2048" ? (
        <LineChart
          id="maxtile"
          title="Largest tile (mean)"
          smooth={SMOOTH}
          points={series((s) => s.maxTile)}
          color="#c56a00"
        />
      ) : (
        <LineChart id="win" title="Win rate" smooth={SMOOTH} points={series((s) => s.win)} color="#1d8a4e" />
      )}
      <LineChart id="loss" title="Policy loss" smooth={SMOOTH} points={series((s) => s.policyLoss)} color="#7a3fc0" />
      <LineChart id="kl" title="KL divergence" points={series((s) => s.kl)} color="#b03050" />
      <LineChart id="entropy" title="Entropy" points={series((s) => s.entropy)} color="#2f8f9d" />
      <LineChart id="gradnorm" title="Gradient norm" points={series((s) => s.gradNorm)} color="#8a6d1d" />
      <LineChart id="tps" title="Training tokens/s" points={series((s) => s.tokensPerSecond)} color="#555" />
    </section>
  );
}
