// A small line chart in plain SVG over training steps: one series (optionally with a shaded band, mean ± std, and
// its moving average drawn over the faint raw points, as the CLI's chart does) or several named series with a legend.
import { rollingMean } from "webart";
import { num } from "../lib/format.ts";

export interface Point {
  x: number;
  y: number;
  lo?: number;
  hi?: number;
}

export interface Line {
  name: string;
  color: string;
  points: Point[];
}

const W = 320;
const H = 150;
const PAD = { l: 44, r: 10, t: 10, b: 24 };

/** The moving average of a series over `k` steps (fewer at the start). */
export function smoothed(points: Point[], k: number): Point[] {
  return rollingMean(
    points.map((p): [number, number] => [p.x, p.y]),
    k,
  ).map(([x, y]) => ({ x, y }));
}

export function LineChart(props: {
  id: string;
  title: string;
  points?: Point[];
  color?: string;
  /** Draw the points faint under their moving average over this many steps (from 3 points on). */
  smooth?: number;
  /** Named series drawn together, with a legend. */
  lines?: Line[];
}) {
  const color = props.color ?? "#2f6fdd";
  const main = (props.points ?? []).filter((p) => Number.isFinite(p.y));
  const avg = props.smooth && main.length >= 3 ? smoothed(main, props.smooth) : null;
  const lines: Line[] = [
    ...(avg ? [{ name: `mean over ${props.smooth} steps`, color, points: avg }] : []),
    ...(props.lines ?? []).map((l) => ({ ...l, points: l.points.filter((p) => Number.isFinite(p.y)) })),
  ];
  const all = [...main, ...lines.flatMap((l) => l.points)];
  const ys = all.flatMap((p) => [p.y, p.lo ?? p.y, p.hi ?? p.y]);
  let y0 = ys.length ? Math.min(...ys) : 0;
  let y1 = ys.length ? Math.max(...ys) : 1;
  if (y1 - y0 < 1e-9) [y0, y1] = [y0 - (Math.abs(y0) || 1) * 0.1, y1 + (Math.abs(y1) || 1) * 0.1];
  const x0 = all.length ? Math.min(...all.map((p) => p.x)) : 0;
  const x1 = all.length ? Math.max(...all.map((p) => p.x)) : 1;
  const sx = (x: number) => PAD.l + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const sy = (y: number) => PAD.t + (1 - (y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  const path = (pts: Point[]) => pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
  const band = main.some((p) => p.lo !== undefined)
    ? [
        ...main.map((p) => `${sx(p.x).toFixed(1)},${sy(p.hi ?? p.y).toFixed(1)}`),
        ...[...main].reverse().map((p) => `${sx(p.x).toFixed(1)},${sy(p.lo ?? p.y).toFixed(1)}`),
      ].join(" ")
    : null;
  const shown = main.length ? main : (lines[0]?.points ?? []);
  const last = (avg ?? shown)[(avg ?? shown).length - 1];
  const faint = avg ? 0.35 : 1;
  const legend = (props.lines?.length ?? 0) > 0 || avg;
  return (
    <figure
      className="chart"
      data-testid={`chart-${props.id}`}
      data-points={main.length || Math.max(0, ...lines.map((l) => l.points.length))}
      data-series={(main.length ? 1 : 0) + (props.lines?.length ?? 0)}
    >
      <figcaption>
        {props.title}
        <span className="chart-last">{!all.length ? "no data yet" : main.length && last ? num(last.y) : ""}</span>
      </figcaption>
      <svg
        viewBox={`0 0 ${W} ${H}`}
        role="img"
        aria-label={`${props.title}: ${all.length ? `${shown.length} points` : "no points"}${last ? `, last ${num(last.y)}` : ""}`}
      >
        <line className="axis" x1={PAD.l} y1={H - PAD.b} x2={W - PAD.r} y2={H - PAD.b} />
        <line className="axis" x1={PAD.l} y1={PAD.t} x2={PAD.l} y2={H - PAD.b} />
        {all.length === 0 && (
          <text className="tick" x={(W + PAD.l) / 2} y={H / 2} textAnchor="middle">
            appears after the first step
          </text>
        )}
        {all.length > 0 && (
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
        {main.length > 1 && (
          <polyline points={path(main)} fill="none" stroke={color} strokeWidth={avg ? 1 : 2} strokeOpacity={faint} />
        )}
        {main.map((p) => (
          <circle key={p.x} className="pt" cx={sx(p.x)} cy={sy(p.y)} r={avg ? 2 : 3} fill={color} fillOpacity={faint}>
            <title>{`step ${p.x}: ${num(p.y)}`}</title>
          </circle>
        ))}
        {lines.map((l) => (
          <g key={l.name} className="series" data-name={l.name}>
            {l.points.length > 1 && <polyline points={path(l.points)} fill="none" stroke={l.color} strokeWidth={2} />}
            {l !== lines[0] || !avg
              ? l.points.map((p) => (
                  <circle key={p.x} cx={sx(p.x)} cy={sy(p.y)} r={3} fill={l.color}>
                    <title>{`${l.name}, step ${p.x}: ${num(p.y)}`}</title>
                  </circle>
                ))
              : null}
          </g>
        ))}
      </svg>
      {legend && (
        <ul className="legend">
          {avg && <li style={{ color }}>· each step</li>}
          {lines.map((l) => (
            <li key={l.name} style={{ color: l.color }}>
              ■ {l.name}
              {l.points.length > 0 && ` ${num(l.points[l.points.length - 1].y)}`}
            </li>
          ))}
        </ul>
      )}
    </figure>
  );
}
