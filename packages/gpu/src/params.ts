// Packs a kernel's uniform parameters (u32 / i32 / f32 fields, 4 bytes each, WGSL struct order). A decode step
// packs ~150 of them, so fields stay in plain arrays and are written straight into the recorder's uniform chunk
// (no typed arrays made per dispatch: that took ~3 us of each).

const U = 0;
const I = 1;
const F = 2;

export class Params {
  private words: number[] = [];
  private kinds: number[] = [];
  u32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) throw new RangeError(`Params.u32: ${x} is not a u32`);
      this.words.push(x);
      this.kinds.push(U);
    }
    return this;
  }
  i32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < -0x80000000 || x > 0x7fffffff)
        throw new RangeError(`Params.i32: ${x} is not an i32`);
      this.words.push(x);
      this.kinds.push(I);
    }
    return this;
  }
  f32(...v: number[]): this {
    for (const x of v) {
      this.words.push(x);
      this.kinds.push(F);
    }
    return this;
  }
  /** Size in bytes, padded to 16 as uniform structs require. */
  get byteLength(): number {
    return Math.max(16, Math.ceil(this.words.length / 4) * 16);
  }
  /** Writes the fields from word `at` of three views of one buffer, and zeroes the padding up to byteLength. */
  write(u: Uint32Array, i: Int32Array, f: Float32Array, at: number): void {
    const w = this.words;
    const k = this.kinds;
    for (let j = 0; j < w.length; j++) {
      if (k[j] === U) u[at + j] = w[j];
      else if (k[j] === F) f[at + j] = w[j];
      else i[at + j] = w[j];
    }
    const end = this.byteLength / 4;
    for (let j = w.length; j < end; j++) u[at + j] = 0;
  }
  /** The bytes, padded (a new buffer). */
  bytes(): Uint8Array {
    const buf = new ArrayBuffer(this.byteLength);
    this.write(new Uint32Array(buf), new Int32Array(buf), new Float32Array(buf), 0);
    return new Uint8Array(buf);
  }
}
