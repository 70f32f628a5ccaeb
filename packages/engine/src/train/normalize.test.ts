// The loss types' coefficients: what each sequence's trained tokens weigh in the step's loss.
import { describe, expect, it } from "vitest";
import { lossCoefficients } from "./normalize.ts";

describe("lossCoefficients", () => {
  const n = [2, 5, 1]; // trained tokens of three sequences
  const weight = (c: number[]) => c.map((x, i) => x * n[i]); // each sequence's share of the loss
  it("sequence: every sequence weighs 1/S, split over its own tokens", () => {
    const c = lossCoefficients(n, "sequence");
    expect(c).toEqual([1 / 6, 1 / 15, 1 / 3]);
    for (const w of weight(c)) expect(w).toBeCloseTo(1 / 3, 12);
  });
  it("token: every token weighs 1/Σn", () => {
    expect(lossCoefficients(n, "token")).toEqual([1 / 8, 1 / 8, 1 / 8]);
  });
  it("dr_grpo: 1 / (S x maxTokens), the longest sequence's count unless a constant is given", () => {
    expect(lossCoefficients(n, "dr_grpo")).toEqual([1 / 15, 1 / 15, 1 / 15]);
    expect(lossCoefficients(n, "dr_grpo", 100)).toEqual([1 / 300, 1 / 300, 1 / 300]);
  });
  it("no sequences: no coefficients", () => {
    expect(lossCoefficients([], "token")).toEqual([]);
  });
});
