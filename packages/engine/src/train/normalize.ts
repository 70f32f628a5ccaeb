// The GRPO loss's normalisation: the coefficient of each sequence's trained tokens, fixed over the whole step
// before it is micro-batched, so the step's loss and gradient do not depend on how it is split.

/** "sequence": each sequence weighs the same (ART); "token": every token the same; "dr_grpo": sum / (sequences x maxTokens). */
export type LossType = "sequence" | "token" | "dr_grpo";

/**
 * Each sequence's loss coefficient, from its trained-token count n_i over S sequences: "sequence" 1 / (S n_i),
 * "token" 1 / Σ n, "dr_grpo" 1 / (S maxTokens), maxTokens being `drGrpoMaxTokens` or, when 0, the largest n_i.
 */
export function lossCoefficients(trained: number[], lossType: LossType, drGrpoMaxTokens = 0): number[] {
  const nSeq = trained.length;
  const nTok = trained.reduce((s, n) => s + n, 0);
  const maxLen = drGrpoMaxTokens || Math.max(1, ...trained);
  return trained.map((n) =>
    lossType === "token" ? 1 / nTok : lossType === "dr_grpo" ? 1 / (nSeq * maxLen) : 1 / (nSeq * n),
  );
}
