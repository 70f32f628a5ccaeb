// 4-bit weights (q4) on the CPU: how the loader quantizes a frozen base matrix, and the values the GPU computes with.
// Elements are taken in their flat order in groups of Q4_GROUP. A group keeps a bf16 scale s (its largest magnitude
// over 7, rounded up to bf16, at least 2^-14) and each element as q = round(w / s) in -8..7, stored as q + 8 in a
// nibble: element e sits in u32 word e / 8 at bits 4·(e % 8); scale g in u32 word g / 2, low half for even g.
// Every value q·s is then exact in f16 (|q| <= 8 and s's 8 significant bits make at most 11, and s >= 2^-14 keeps
// q·s in f16's normal range), so a matmul over a dequantized f16 copy and a matvec that multiplies q by s in f32
// compute with the same weights.
import { fromBf16, toBf16 } from "@webart/gpu";

/** Elements that share a scale. */
export const Q4_GROUP = 32;
/** The least scale (2^-14, f16's least normal): a group of smaller weights is quantized on this step. */
export const Q4_MIN_SCALE = 2 ** -14;
/** The largest scale (q·s stays within f16's range). */
export const Q4_MAX_SCALE = 4096;

/** Bytes of the nibbles and of the scales of n elements (each rounded up to whole u32 words). */
export function q4Bytes(n: number): { nibbles: number; scales: number } {
  return { nibbles: Math.ceil(n / 8) * 4, scales: Math.ceil(Math.ceil(n / Q4_GROUP) / 2) * 4 };
}

/**
 * Quantizes n = values.length elements (a whole number of groups, or a tail group padded with zeros) into `nibbles`
 * and `scales` (fresh arrays unless given, each from element 0). Throws on a value that is not finite, or a group
 * whose scale would pass Q4_MAX_SCALE, naming its element index (`what` names the tensor).
 */
export function quantizeQ4(
  values: ArrayLike<number>,
  what = "tensor",
  out?: { nibbles: Uint32Array; scales: Uint32Array },
): { nibbles: Uint32Array; scales: Uint32Array } {
  const n = values.length;
  const bytes = q4Bytes(n);
  const nibbles = out?.nibbles ?? new Uint32Array(bytes.nibbles / 4);
  const scales = out?.scales ?? new Uint32Array(bytes.scales / 4);
  for (let g = 0; g * Q4_GROUP < n; g++) {
    const e0 = g * Q4_GROUP;
    const e1 = Math.min(n, e0 + Q4_GROUP);
    let max = 0;
    for (let e = e0; e < e1; e++) {
      const v = values[e];
      if (!Number.isFinite(v))
        throw new Error(`q4: ${what} element ${e} is ${v}; only finite weights can be quantized`);
      max = Math.max(max, Math.abs(v));
    }
    let bits = toBf16(Math.max(max / 7, Q4_MIN_SCALE));
    if (fromBf16(bits) < max / 7) bits++; // rounded up: every |w / s| <= 7
    const s = fromBf16(bits);
    if (s > Q4_MAX_SCALE)
      throw new Error(
        `q4: ${what} has a weight of magnitude ${max} (element ${e0}..${e1 - 1}); q4 takes up to ${7 * Q4_MAX_SCALE}`,
      );
    scales[g >> 1] = (scales[g >> 1] & ~(0xffff << ((g & 1) * 16))) | (bits << ((g & 1) * 16));
    for (let e = e0; e < e1; e++) {
      const q = Math.max(-8, Math.min(7, Math.round(values[e] / s)));
      const w = e >> 3;
      const shift = (e & 7) * 4;
      nibbles[w] = (nibbles[w] & ~(0xf << shift)) | ((q + 8) << shift);
    }
  }
  return { nibbles, scales };
}

/** The f32 values of n q4 elements from element `first` (a multiple of 8) of their arrays: what the GPU computes with. */
export function dequantizeQ4(nibbles: Uint32Array, scales: Uint32Array, n: number, first = 0): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const e = first + i;
    const g = Math.floor(e / Q4_GROUP);
    const s = fromBf16((scales[g >> 1] >>> ((g & 1) * 16)) & 0xffff);
    out[i] = (((nibbles[e >> 3] >>> ((e & 7) * 4)) & 0xf) - 8) * s;
  }
  return out;
}
