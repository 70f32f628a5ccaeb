// Dynamic sampling (`--max-groups`): which groups a step draws, in which calls, and when it stops. Groups here are
// made with fixed rewards; the CLI test runs the same path through the real model.
import { describe, expect, it } from "vitest";
import { Trajectory, TrajectoryGroup } from "@webart/engine";
import { drawUntilVaried, groupVaries } from "./games.ts";

/** A group of two rollouts: rewards 0 and 1 if `varies`, else 1 and 1. */
const group = (varies: boolean) => new TrajectoryGroup([0, 1].map((i) => new Trajectory({ reward: varies ? i : 1 })));

/** A draw function over a fixed pattern of groups (true: varies), recording each call's (from, count). */
function drawer(pattern: boolean[]) {
  const calls: [number, number][] = [];
  const draw = async (from: number, count: number) => {
    calls.push([from, count]);
    return Array.from({ length: count }, (_, k) => {
      if (from + k >= pattern.length) throw new Error(`group ${from + k} drawn past the pattern`);
      return group(pattern[from + k]);
    });
  };
  return { draw, calls };
}

describe("dynamic sampling", () => {
  it("a group varies when its rewards differ; one reward, or none, does not", () => {
    expect(groupVaries(group(true))).toBe(true);
    expect(groupVaries(group(false))).toBe(false);
    expect(groupVaries(new TrajectoryGroup())).toBe(false);
  });

  it("draws only the first groups when enough of them vary", async () => {
    const d = drawer([true, true, true, false]);
    expect(await drawUntilVaried(d.draw, 3, 9)).toHaveLength(3);
    expect(d.calls).toEqual([[0, 3]]);
  });

  it("draws as many more as are missing, from the next index, until enough vary", async () => {
    // 4 wanted; 1 of the first 4 varies, so 3 more; 1 of those varies, so 2 more; both vary.
    const d = drawer([false, true, false, false, false, true, false, true, true, false]);
    const groups = await drawUntilVaried(d.draw, 4, 12);
    expect(d.calls).toEqual([
      [0, 4],
      [4, 3],
      [7, 2],
    ]);
    expect(groups).toHaveLength(9);
    expect(groups.filter(groupVaries)).toHaveLength(4);
  });

  it("stops at max drawn groups, the last call cut to fit; max = want draws nothing more", async () => {
    const d = drawer(Array(6).fill(false));
    expect(await drawUntilVaried(d.draw, 4, 6)).toHaveLength(6);
    expect(d.calls).toEqual([
      [0, 4],
      [4, 2],
    ]);
    const once = drawer(Array(4).fill(false));
    expect(await drawUntilVaried(once.draw, 4, 4)).toHaveLength(4);
    expect(once.calls).toEqual([[0, 4]]);
  });
});
