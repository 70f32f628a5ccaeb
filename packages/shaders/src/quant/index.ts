// 4-bit frozen weights (q4, quant/reference.ts): the f16 copy the matmuls read, made on the GPU from the nibbles and
// scales.
import { Params, sizeOf, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./dequant.wgsl";
import gather from "./gather.wgsl";
import { q4Bytes } from "./reference.ts";

export { Q4_GROUP, Q4_MAX_SCALE, Q4_MIN_SCALE, q4Bytes, quantizeQ4, dequantizeQ4 } from "./reference.ts";

const WG = 256;
export const q4DequantSpec: KernelSpec = { name: "q4_dequant", code, overrides: { WG } };

/** Bytes of the f16 copy of n q4 elements (q4Dequant writes whole 8-element vectors). */
export function q4DequantBytes(n: number): number {
  return Math.ceil(n / 8) * 16;
}

/**
 * out (f16, two a u32, from element 0) = the n q4 elements from element `first` (a multiple of 8) of q (nibbles) and
 * s (scales). Checks the buffers' sizes first.
 */
export function q4Dequant(
  gpu: Gpu,
  rec: Recorder,
  { q, s, out }: { q: GPUBuffer; s: GPUBuffer; out: GPUBuffer },
  { n, first = 0 }: { n: number; first?: number },
): void {
  if (!Number.isInteger(n) || n < 1) throw new Error(`q4Dequant: n = ${n} must be a positive integer`);
  if (!Number.isInteger(first) || first < 0 || first % 8 !== 0)
    throw new Error(`q4Dequant: first = ${first} must be a multiple of 8 (a whole word of nibbles)`);
  const need = q4Bytes(first + n);
  const checks: [string, GPUBuffer, number][] = [
    ["nibbles", q, need.nibbles],
    ["scales", s, need.scales],
    ["out", out, q4DequantBytes(n)],
  ];
  for (const [what, buf, bytes] of checks)
    if (sizeOf(buf) < bytes)
      throw new Error(`q4Dequant: ${what} needs ${bytes} bytes but its buffer has ${sizeOf(buf)}`);
  const words = Math.ceil(n / 8);
  rec.dispatch(q4DequantSpec, [q, s, out], gpu.grid(Math.ceil(words / WG)), new Params().u32(words, first, 0, 0));
}

export const q4GatherSpec: KernelSpec = { name: "q4_gather", code: gather, overrides: { WG } };

/**
 * out (N, C) f32 = rows ids[n] of a (V, C) q4 table (nibbles q, scales s, from element 0) times `scale`: the embedding
 * of q4 weights. C must be a multiple of 32 (a row is whole groups). Checks the buffers' sizes first.
 */
export function q4Gather(
  gpu: Gpu,
  rec: Recorder,
  { ids, q, s, out }: { ids: GPUBuffer; q: GPUBuffer; s: GPUBuffer; out: GPUBuffer },
  { N, C, V, scale = 1 }: { N: number; C: number; V: number; scale?: number },
): void {
  if (N === 0) return;
  if (!Number.isInteger(C) || C < 32 || C % 32 !== 0)
    throw new Error(`q4Gather: C = ${C} must be a multiple of 32 (a row of whole groups)`);
  if (V * C > 0xffffffff) throw new Error(`q4Gather: V * C = ${V * C} exceeds the u32 index range`);
  const need = q4Bytes(V * C);
  const checks: [string, GPUBuffer, number][] = [
    ["ids", ids, N * 4],
    ["nibbles", q, need.nibbles],
    ["scales", s, need.scales],
    ["out", out, N * C * 4],
  ];
  for (const [what, buf, bytes] of checks)
    if (sizeOf(buf) < bytes)
      throw new Error(`q4Gather: ${what} needs ${bytes} bytes but its buffer has ${sizeOf(buf)}`);
  const threads = (N * C) / 8;
  rec.dispatch(q4GatherSpec, [ids, q, s, out], gpu.grid(Math.ceil(threads / WG)), new Params().u32(N, C, V).f32(scale));
}
