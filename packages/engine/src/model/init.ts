// Seeded random weights for a Llama-form config (GPT-2-style init), as safetensors bytes: the embedded
// model's starting point, and small models for tests and benchmarks.
import { Rng, toBf16 } from "@webart/gpu";
import { EMBED, LM_HEAD, PROJECTIONS, tensorShapes, type ModelConfig } from "../config/index.ts";
import { writeSafetensors, type TensorData } from "../weights/index.ts";

export interface InitOptions {
  seed?: number;
  /** Std of matrices (default 0.02); residual output projections get std / sqrt(2 layers). */
  std?: number;
  /** Std of the embedding (default: std). */
  embedStd?: number;
  /** Std of an untied lm_head (default: embedStd). */
  headStd?: number;
  /** Store matrices as bf16 (the 1-D norm weights too). */
  bf16?: boolean;
}

/** The projections that write into the residual stream: GPT-2's init scales them down by the depth. */
const RESIDUAL_OUT = [PROJECTIONS.o, PROJECTIONS.down];

export function randomWeights(c: ModelConfig, o: InitOptions = {}): Uint8Array {
  const rng = new Rng(o.seed ?? 1);
  const std = o.std ?? 0.02;
  const tensors: TensorData[] = [];
  for (const [name, shape] of tensorShapes(c)) {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    if (name.endsWith("norm.weight")) data.fill(1);
    else if (name.endsWith(".bias")) data.fill(0);
    else {
      const s =
        name === LM_HEAD
          ? (o.headStd ?? o.embedStd ?? std)
          : name === EMBED
            ? (o.embedStd ?? std)
            : RESIDUAL_OUT.some((m) => name.endsWith(`.${m}.weight`))
              ? std / Math.sqrt(2 * c.numLayers)
              : std;
      for (let i = 0; i < n; i++) data[i] = rng.normal() * s;
    }
    if (o.bf16) {
      const u16 = new Uint16Array(n);
      for (let i = 0; i < n; i++) u16[i] = toBf16(data[i]);
      tensors.push({ name, dtype: "BF16", shape, data: new Uint8Array(u16.buffer) });
    } else tensors.push({ name, dtype: "F32", shape, data });
  }
  return writeSafetensors(tensors, { format: "pt" });
}
