// A small SVG line chart (reward and win rate against step) written into each run's directory.
import type { GameName } from "@webart/envs";

export interface Series {
  name: string;
  color: string;
  points: [number, number][];
  /** Drawn thin and faint without dots (the raw values under a smoothed line). */
  faint?: boolean;
}

/** The mean of each point's value and the k - 1 before it (fewer at the start). */
export function rollingMean(points: [number, number][], k: number): [number, number][] {
  return points.map(([x], i) => {
    const w = points.slice(Math.max(0, i - k + 1), i + 1);
    return [x, w.reduce((a, p) => a + p[1], 0) / w.length];
  });
}

export function lineChart(
  title: string,
  series: Series[],
  opts: { width?: number; height?: number; yMin?: number; yMax?: number } = {},
): string {
  const W = opts.width ?? 640;
  const H = opts.height ?? 320;
  const m = { l: 48, r: 16, t: 48, b: 40 };
  const all = series.flatMap((s) => s.points);
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const x0 = Math.min(0, ...xs);
  const x1 = Math.max(1, ...xs);
  const y0 = opts.yMin ?? Math.min(0, ...ys);
  const y1 = opts.yMax ?? Math.max(1, ...ys);
  const sx = (x: number) => m.l + ((x - x0) / (x1 - x0 || 1)) * (W - m.l - m.r);
  const sy = (y: number) => H - m.b - ((y - y0) / (y1 - y0 || 1)) * (H - m.t - m.b);
  const ticks = 5;
  const grid = Array.from({ length: ticks + 1 }, (_, i) => {
    const y = y0 + ((y1 - y0) * i) / ticks;
    return `<line x1="${m.l}" x2="${W - m.r}" y1="${sy(y)}" y2="${sy(y)}" stroke="#e3e6ea"/><text x="${m.l - 6}" y="${sy(y) + 4}" text-anchor="end" font-size="11">${y.toFixed(2)}</text>`;
  }).join("");
  const xticks = Array.from({ length: ticks + 1 }, (_, i) => {
    const x = Math.round(x0 + ((x1 - x0) * i) / ticks);
    return `<text x="${sx(x)}" y="${H - m.b + 16}" text-anchor="middle" font-size="11">${x}</text>`;
  }).join("");
  const lines = series
    .map((s) => {
      const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
      if (s.faint) return `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1" stroke-opacity="0.35"/>`;
      const dots =
        s.points.length > 60
          ? ""
          : s.points
              .map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="${s.color}"/>`)
              .join("");
      return `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"/>${dots}`;
    })
    .join("");
  const named = series.filter((s) => !s.faint);
  const gap = Math.min(260, (W - m.l - m.r) / Math.max(1, named.length));
  const legend = named
    .map((s, k) => `<text x="${m.l + 8 + k * gap}" y="${m.t - 14}" font-size="12" fill="${s.color}">■ ${s.name}</text>`)
    .join("");
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">` +
    `<rect width="${W}" height="${H}" fill="white"/><text x="${W / 2}" y="16" text-anchor="middle" font-size="13">${title}</text>` +
    `${grid}<line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#555"/>` +
    `<text x="${(W + m.l) / 2}" y="${H - 6}" text-anchor="middle" font-size="12">step</text>${xticks}${lines}${legend}</svg>\n`
  );
}

/** How each game's score is drawn: its name on the chart, the divisor that brings it near [0, 1], the top of the axis. */
const SCORES: Record<GameName, { name: string; scale: number; yMax: number }> = {
  tictactoe: { name: "win + draw rate", scale: 1, yMax: 1 },
  "2048": { name: "max tile / 64", scale: 64, yMax: 2 },
  email: { name: "accuracy", scale: 1, yMax: 1 },
};

/**
 * A run's chart: mean reward and the game's score (win + draw rate, max tile / 64, accuracy) per step, raw and over
 * 10 steps. A custom task's score is its validation: the checkpoint's judge score and the base model's, at the steps
 * that validated (`score`, `base`).
 */
export function trainingChart(
  title: string,
  env: GameName | "custom",
  history: { step: number; reward: number; score?: number; base?: number }[],
): string {
  const rewards = history.map((h): [number, number] => [h.step, h.reward]);
  const reward = [
    { name: "mean reward", color: "#1f6feb", points: rewards, faint: true },
    { name: "mean reward (10 steps)", color: "#1f6feb", points: rollingMean(rewards, 10) },
  ];
  if (env === "custom") {
    const at = (k: "score" | "base") =>
      history.filter((h) => typeof h[k] === "number").map((h): [number, number] => [h.step, h[k]!]);
    return lineChart(
      `${title}: each step's rollouts (faint) and their mean over 10 steps; held-out scenarios, judged side by side`,
      [
        ...reward,
        { name: "validation: checkpoint", color: "#d9480f", points: at("score") },
        { name: "validation: base model", color: "#868e96", points: at("base") },
      ],
      { yMin: -1, yMax: 1 },
    );
  }
  const { name: score, scale, yMax } = SCORES[env];
  const scores = history.map((h): [number, number] => [h.step, (h.score ?? NaN) / scale]);
  return lineChart(
    `${title}: each step's rollouts (faint), and their mean over 10 steps`,
    [
      reward[0],
      { name: score, color: "#d9480f", points: scores, faint: true },
      reward[1],
      { name: `${score} (10 steps)`, color: "#d9480f", points: rollingMean(scores, 10) },
    ],
    { yMin: -1, yMax },
  );
}
