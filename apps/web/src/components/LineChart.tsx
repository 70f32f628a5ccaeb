// A small line chart in plain SVG: one series over training steps, optionally with a shaded band (mean ± std).
import { num } from "../lib/format.ts";

export interface Point {
  x: number;
  y: number;
  lo?: number;
  hi?: number;
}

const W = 320;
const H = 150;
const PAD = { l: 44, r: 10, t: 10, b: 24 };

export function LineChart(props: { id: string; title: string; points: Point[]; color?: string }) {
  const pts = props.points.filter((p) => Number.isFinite(p.y));
  const ys = pts.flatMap((p) => [p.y, p.lo ?? p.y, p.hi ?? p.y]);
  let y0 = ys.length ? Math.min(...ys) : 0;
  let y1 = ys.length ? Math.max(...ys) : 1;
  if (y1 - y0 < 1e-9) [y0, y1] = [y0 - (Math.abs(y0) || 1) * 0.1, y1 + (Math.abs(y1) || 1) * 0.1];
  const x0 = pts.length ? Math.min(...pts.map((p) => p.x)) : 0;
  const x1 = pts.length ? Math.max(...pts.map((p) => p.x)) : 1;
  const sx = (x: number) => PAD.l + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const sy = (y: number) => PAD.t + (1 - (y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  const line = pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
  const band = pts.some((p) => p.lo !== undefined)
    ? [
        ...pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.hi ?? p.y).toFixed(1)}`),
        ...[...pts].reverse().map((p) => `${sx(p.x).toFixed(1)},${sy(p.lo ?? p.y).toFixed(1)}`),
      ].join(" ")
    : null;
  const color = props.color ?? "#2f6fdd";
  const last = pts[pts.length - 1];
  return (
    <figure className="chart" data-testid={`chart-${props.id}`} data-points={pts.length}>
      <figcaption>
        {props.title}
        <span className="chart-last">{last ? num(last.y) : "no data yet"}</span>
      </figcaption>
      <svg
        viewBox={`0 0 ${W} ${H}`}
        role="img"
        aria-label={`${props.title}: ${pts.length} points${last ? `, last ${num(last.y)}` : ""}`}
      >
        <line className="axis" x1={PAD.l} y1={H - PAD.b} x2={W - PAD.r} y2={H - PAD.b} />
        <line className="axis" x1={PAD.l} y1={PAD.t} x2={PAD.l} y2={H - PAD.b} />
        {pts.length === 0 && (
          <text className="tick" x={(W + PAD.l) / 2} y={H / 2} textAnchor="middle">
            appears after the first step
          </text>
        )}
        {pts.length > 0 && (
          <>
            <text className="tick" x={PAD.l - 4} y={PAD.t + 8} textAnchor="end">
              {num(y1, 2)}
            </text>
            <text className="tick" x={PAD.l - 4} y={H - PAD.b} textAnchor="end">
              {num(y0, 2)}
            </text>
            <text className="tick" x={PAD.l} y={H - 6} textAnchor="start">
              step {x0}
            </text>
            <text className="tick" x={W - PAD.r} y={H - 6} textAnchor="end">
              {x1}
            </text>
          </>
        )}
        {band && <polygon className="band" points={band} fill={color} />}
        {pts.length > 1 && <polyline points={line} fill="none" stroke={color} strokeWidth={2} />}
        {pts.map((p) => (
          <circle key={p.x} className="pt" cx={sx(p.x)} cy={sy(p.y)} r={3} fill={color}>
            <title>{`step ${p.x}: ${num(p.y)}`}</title>
          </circle>
        ))}
      </svg>
    </figure>
  );
}
