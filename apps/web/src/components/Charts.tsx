// The live training charts, one per metric, redrawn as each step's row arrives.
import type { EnvName, StepRow } from "../api.ts";
import { LineChart } from "./LineChart.tsx";

export function Charts(props: { rows: StepRow[]; env: EnvName }) {
  const r = props.rows;
  const series = (f: (s: StepRow) => number | undefined) =>
    r.flatMap((s) => (f(s) === undefined ? [] : [{ x: s.step, y: f(s)! }]));
  return (
    <section aria-label="Training charts" className="charts">
      <LineChart
        id="reward"
        title="Reward (mean ± std)"
        points={r.map((s) => ({ x: s.step, y: s.reward, lo: s.reward - s.rewardStd, hi: s.reward + s.rewardStd }))}
      />
      {props.env === "2048" ? (
        <LineChart id="maxtile" title="Largest tile (mean)" points={series((s) => s.maxTile)} color="#c56a00" />
      ) : (
        <LineChart id="win" title="Win rate" points={series((s) => s.win)} color="#1d8a4e" />
      )}
      <LineChart id="loss" title="Policy loss" points={series((s) => s.policyLoss)} color="#7a3fc0" />
      <LineChart id="kl" title="KL divergence" points={series((s) => s.kl)} color="#b03050" />
      <LineChart id="entropy" title="Entropy" points={series((s) => s.entropy)} color="#2f8f9d" />
      <LineChart id="gradnorm" title="Gradient norm" points={series((s) => s.gradNorm)} color="#8a6d1d" />
      <LineChart id="tps" title="Training tokens/s" points={series((s) => s.tokensPerSecond)} color="#555" />
    </section>
  );
}
