// The run chart: its 10-step means and the SVG it draws.
import { describe, expect, it } from "vitest";
import { rollingMean, trainingChart } from "./chart.ts";

describe("chart", () => {
  it("rollingMean averages each point with the k - 1 before it", () => {
    expect(
      rollingMean(
        [
          [1, 2],
          [2, 4],
          [3, 0],
          [4, 8],
        ],
        2,
      ),
    ).toEqual([
      [1, 2],
      [2, 3],
      [3, 2],
      [4, 4],
    ]);
    expect(
      rollingMean(
        [
          [1, 1],
          [2, 3],
        ],
        10,
      ),
    ).toEqual([
      [1, 1],
      [2, 2],
    ]);
  });

  it("trainingChart draws faint raw lines and labelled smoothed lines", () => {
    const history = Array.from({ length: 30 }, (_, i) => ({ step: i + 1, reward: i % 2 ? 0.5 : -0.5, score: i / 30 }));
    const svg = trainingChart("tictactoe/agent", "tictactoe", history);
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg.match(/stroke-opacity="0.35"/g)?.length).toBe(2);
    expect(svg).toContain("win + draw rate (10 steps)");
    expect(svg).toContain("mean reward (10 steps)");
    expect(svg.match(/<path /g)?.length).toBe(4);
    // Each game's score under its own name, drawn near [0, 1].
    expect(trainingChart("email/agent", "email", history)).toContain("accuracy (10 steps)");
    expect(trainingChart("2048/agent", "2048", history)).toContain("max tile / 64 (10 steps)");
  });
});
