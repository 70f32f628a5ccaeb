// 16-bit float conversions on the CPU (bf16 and f16), and packing two per u32 as the GPU reads them.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** f32 → bf16 bits, round to nearest even. */
export function toBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7f800000) === 0x7f800000 && u & 0x7fffff) return ((u >>> 16) | 0x40) & 0xffff; // NaN stays NaN
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function fromBf16(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0];
}

/** f32 → IEEE f16 bits, round to nearest even. */
export function toF16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && m & 1)) m++;
    return sign | m;
  }
  let m = mant >>> 13;
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && m & 1)) {
    m++;
    if (m === 0x400) {
      m = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

export function fromF16(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

export type HalfKind = "bf16" | "f16";

/** Packs values as 16-bit floats, two per u32 (element 2i in the low half), padding odd lengths. */
export function packHalf(values: ArrayLike<number>, kind: HalfKind): Uint32Array {
  const conv = kind === "bf16" ? toBf16 : toF16;
  const out = new Uint32Array(Math.ceil(values.length / 2));
  for (let i = 0; i < values.length; i++) out[i >> 1] |= conv(values[i]) << ((i & 1) * 16);
  return out;
}

/** The f32 values that packed 16-bit weights represent (what the GPU computes with). */
export function roundHalf(values: ArrayLike<number>, kind: HalfKind): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++)
    out[i] = kind === "bf16" ? fromBf16(toBf16(values[i])) : fromF16(toF16(values[i]));
  return out;
}
