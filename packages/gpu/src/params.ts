// Packs a kernel's uniform parameters (u32 / i32 / f32 fields, 4 bytes each, WGSL struct order). A decode step
// packs ~150 of them, so fields stay in a plain array and are written straight into the recorder's uniform chunk
// (no typed arrays made per dispatch: that took ~3 us of each).

/** f32 fields are kept as their bit patterns, read through this pair of views. */
const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

export class Params {
  /** Each field's 32 bits as a u32 (an i32 as its two's complement, an f32 as its bit pattern). */
  private words: number[] = [];
  u32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) throw new RangeError(`Params.u32: ${x} is not a u32`);
      this.words.push(x);
    }
    return this;
  }
  i32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < -0x80000000 || x > 0x7fffffff)
        throw new RangeError(`Params.i32: ${x} is not an i32`);
      this.words.push(x >>> 0);
    }
    return this;
  }
  f32(...v: number[]): this {
    for (const x of v) {
      F32[0] = x;
      this.words.push(U32[0]);
    }
    return this;
  }
  /** Size in bytes, padded to 16 as uniform structs require. */
  get byteLength(): number {
    return Math.max(16, Math.ceil(this.words.length / 4) * 16);
  }
  /** Writes the fields from word `at` of `u`, and zeroes the padding up to byteLength. */
  write(u: Uint32Array, at: number): void {
    const w = this.words;
    for (let j = 0; j < w.length; j++) u[at + j] = w[j];
    const end = this.byteLength / 4;
    for (let j = w.length; j < end; j++) u[at + j] = 0;
  }
  /** The bytes, padded (a new buffer). */
  bytes(): Uint8Array {
    const u = new Uint32Array(this.byteLength / 4);
    this.write(u, 0);
    return new Uint8Array(u.buffer);
  }
}
