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
  values: Float32Array,
  what = "tensor",
  out?: { nibbles: Uint32Array; scales: Uint32Array },
): { nibbles: Uint32Array; scales: Uint32Array } {
  const n = values.length;
  const bytes = q4Bytes(n);
  const nibbles = out?.nibbles ?? new Uint32Array(bytes.nibbles / 4);
  const scales = out?.scales ?? new Uint32Array(bytes.scales / 4);
  // The loader runs this over every projection of a model (billions of weights): typed reads, a word of 8 nibbles
  // built in a local, q + 8 as floor(w / s + 8.5) (Math.round(w / s) + 8; w / s >= -7, so truncation is floor).
  for (let e0 = 0, g = 0; e0 < n; e0 += Q4_GROUP, g++) {
    const e1 = Math.min(n, e0 + Q4_GROUP);
    let max = 0;
    for (let e = e0; e < e1; e++) {
      const a = Math.abs(values[e]);
      if (a > max) max = a;
      else if (!(a <= max)) max = NaN; // NaN compares false both ways
    }
    if (!Number.isFinite(max)) {
      let e = e0;
      while (Number.isFinite(values[e])) e++;
      throw new Error(`q4: ${what} element ${e} is ${values[e]}; only finite weights can be quantized`);
    }
    let bits = toBf16(Math.max(max / 7, Q4_MIN_SCALE));
    if (fromBf16(bits) < max / 7) bits++; // rounded up: every |w / s| <= 7
    const s = fromBf16(bits);
    if (s > Q4_MAX_SCALE)
      throw new Error(
        `q4: ${what} has a weight of magnitude ${max} (element ${e0}..${e1 - 1}); q4 takes up to ${7 * Q4_MAX_SCALE}`,
      );
    scales[g >> 1] = (scales[g >> 1] & ~(0xffff << ((g & 1) * 16))) | (bits << ((g & 1) * 16));
    for (let w0 = e0; w0 < e1; w0 += 8) {
      let word = 0;
      const w1 = Math.min(e1, w0 + 8);
      for (let e = w0; e < w1; e++) {
        const q = (values[e] / s + 8.5) | 0;
        word |= (q < 0 ? 0 : q > 15 ? 15 : q) << ((e - w0) * 4);
      }
      nibbles[w0 >> 3] = word;
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
