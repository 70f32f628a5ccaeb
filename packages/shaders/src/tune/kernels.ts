// Start-up tuning: measures the matmul and matvec variants on this adapter for a model's weight dtype, once per
// adapter and process (the winners stay in tune/'s table, which matmul() and matvec() consult).
import type { Gpu } from "@webart/engine/gpu";
import { tuneMatmul, type WeightDtype } from "../matmul/index.ts";
import { tuneMatvec } from "../matvec/index.ts";

/** Sizes small enough for a CPU adapter (~1 s in all on SwiftShader) and big enough to rank the variants. */
const MATMUL_SIZE = 128;
const MATVEC_SHAPE: [number, number] = [512, 1024];

/**
 * Tunes what a model with `weights` in that dtype runs: linear layers (nt) and their input gradients (nn) against
 * its weights, activation products (nn, f32), and the decode matvec. Returns every winner by tune key.
 */
export async function tuneKernels(gpu: Gpu, weights: WeightDtype): Promise<Record<string, string>> {
  const cases = [
    { mode: "nt" as const, bDtype: weights },
    { mode: "nn" as const, bDtype: weights },
    ...(weights === "f32" ? [] : [{ mode: "nn" as const, bDtype: "f32" as const }]),
  ];
  return {
    ...(await tuneMatmul(gpu, cases, MATMUL_SIZE)),
    ...(await tuneMatvec(gpu, [weights], MATVEC_SHAPE)),
  };
}
