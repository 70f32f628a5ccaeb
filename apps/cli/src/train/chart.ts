// A small SVG line chart (reward and win rate against step) written into each run's directory.
export interface Series {
  name: string;
  color: string;
  points: [number, number][];
}

export function lineChart(title: string, series: Series[], opts: { width?: number; height?: number; yMin?: number; yMax?: number } = {}): string {
  const W = opts.width ?? 640;
  const H = opts.height ?? 320;
  const m = { l: 48, r: 16, t: 32, b: 40 };
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
  const lines = series
    .map((s, k) => {
      const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
      const dots = s.points.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="${s.color}"/>`).join("");
      return `<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"/>${dots}<text x="${m.l + 8 + k * 140}" y="${m.t - 10}" font-size="12" fill="${s.color}">■ ${s.name}</text>`;
    })
    .join("");
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">` +
    `<rect width="${W}" height="${H}" fill="white"/><text x="${W / 2}" y="16" text-anchor="middle" font-size="13">${title}</text>` +
    `${grid}<line x1="${m.l}" x2="${W - m.r}" y1="${H - m.b}" y2="${H - m.b}" stroke="#555"/>` +
    `<text x="${(W + m.l) / 2}" y="${H - 8}" text-anchor="middle" font-size="12">step</text>${lines}</svg>\n`
  );
}
