// 4-bit frozen weights (q4, quant/reference.ts): the f16 copy the matmuls read, made on the GPU from the nibbles and
// scales.
import { kernelSpec, Params, sizeOf, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./dequant.wgsl";
import gather from "./gather.wgsl";
import quantize from "./quantize.wgsl";
import { Q4_GROUP, Q4_MAX_SCALE, q4Bytes } from "./reference.ts";

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

/** The dtypes q4Quantize reads: a tensor's own bytes. */
export type Q4SourceDtype = "f32" | "bf16" | "f16";
const Q4_SOURCE: Record<Q4SourceDtype, number> = { f32: 0, bf16: 1, f16: 2 };
const QUANTIZE_WG = 64;

/** Bytes of q4Quantize's errors buffer for `slots` tensors (two u32 a tensor), and its contents before any runs:
 *  every word 0xffffffff (no error). */
export function q4ErrorsInit(slots: number): Uint32Array {
  return new Uint32Array(2 * slots).fill(0xffffffff);
}

/**
 * Quantizes n elements of `src` (a tensor's bytes in `dtype`, from its element 0) into nibbles and scales from
 * element `outFirst` (a multiple of 64: whole u32s of scales), bit for bit as quantizeQ4 does. The chunk's elements
 * are the tensor's from `base` on: a non-finite element's index (base + i) goes to errors[2·slot] and the first
 * element of a group past Q4_MAX_SCALE to errors[2·slot + 1], each the least such (q4QuantizeError words them).
 * A tail past n is a partial group as quantizeQ4's: its missing nibbles 0. Checks the buffers' sizes first.
 */
export function q4Quantize(
  gpu: Gpu,
  rec: Recorder,
  { src, nibbles, scales, errors }: { src: GPUBuffer; nibbles: GPUBuffer; scales: GPUBuffer; errors: GPUBuffer },
  {
    n,
    dtype,
    outFirst = 0,
    base = 0,
    slot = 0,
  }: { n: number; dtype: Q4SourceDtype; outFirst?: number; base?: number; slot?: number },
): void {
  if (!Number.isInteger(n) || n < 1) throw new Error(`q4Quantize: n = ${n} must be a positive integer`);
  if (!Number.isInteger(outFirst) || outFirst < 0 || outFirst % 64 !== 0)
    throw new Error(`q4Quantize: outFirst = ${outFirst} must be a multiple of 64 (whole words of scales)`);
  if (!(dtype in Q4_SOURCE)) throw new Error(`q4Quantize: dtype ${dtype} is not f32, bf16 or f16`);
  if (outFirst + n > 0xffffffff || base + n > 0xffffffff)
    throw new Error(`q4Quantize: element ${Math.max(outFirst, base) + n} exceeds the u32 index range`);
  const need = q4Bytes(outFirst + n);
  const checks: [string, GPUBuffer, number][] = [
    ["src", src, dtype === "f32" ? n * 4 : Math.ceil(n / 2) * 4],
    ["nibbles", nibbles, need.nibbles],
    ["scales", scales, need.scales],
    ["errors", errors, 8 * (slot + 1)],
  ];
  for (const [what, buf, bytes] of checks)
    if (sizeOf(buf) < bytes)
      throw new Error(`q4Quantize: ${what} needs ${bytes} bytes but its buffer has ${sizeOf(buf)}`);
  const spec = kernelSpec("q4_quantize", quantize, { WG: QUANTIZE_WG, DTYPE: Q4_SOURCE[dtype] });
  const pairs = Math.ceil(n / 64);
  rec.dispatch(
    spec,
    [src, nibbles, scales, errors],
    gpu.grid(Math.ceil(pairs / QUANTIZE_WG)),
    new Params().u32(n, outFirst, base, slot),
  );
}

/** What q4Quantize's errors say of slot `slot` (the words read back), as quantizeQ4's message, or null. */
export function q4QuantizeError(words: Uint32Array, slot: number, what: string): string | null {
  const [nonFinite, tooLarge] = [words[2 * slot], words[2 * slot + 1]];
  if (nonFinite === 0xffffffff && tooLarge === 0xffffffff) return null;
  // The CPU quantizer stops at the first group with either; a group counts once (non-finite first).
  if (nonFinite <= tooLarge)
    return `q4: ${what} element ${nonFinite} is not finite (NaN or Infinity); only finite weights can be quantized`;
  return (
    `q4: ${what} has a weight of magnitude over ${7 * Q4_MAX_SCALE} (element ${tooLarge}..${tooLarge + Q4_GROUP - 1}); ` +
    `q4 takes up to ${7 * Q4_MAX_SCALE}`
  );
}
