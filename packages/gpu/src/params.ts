// Packs a kernel's uniform parameters (u32 / i32 / f32 fields, 4 bytes each, WGSL struct order).

export class Params {
  private words: number[] = [];
  private kinds: ("u" | "i" | "f")[] = [];
  u32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) throw new RangeError(`Params.u32: ${x} is not a u32`);
      this.words.push(x);
      this.kinds.push("u");
    }
    return this;
  }
  i32(...v: number[]): this {
    for (const x of v) {
      if (!Number.isInteger(x) || x < -0x80000000 || x > 0x7fffffff)
        throw new RangeError(`Params.i32: ${x} is not an i32`);
      this.words.push(x);
      this.kinds.push("i");
    }
    return this;
  }
  f32(...v: number[]): this {
    for (const x of v) {
      this.words.push(x);
      this.kinds.push("f");
    }
    return this;
  }
  /** Bytes, padded to 16 as uniform structs require. */
  bytes(): Uint8Array {
    const n = Math.max(4, Math.ceil(this.words.length / 4) * 4);
    const buf = new ArrayBuffer(n * 4);
    const u = new Uint32Array(buf);
    const i = new Int32Array(buf);
    const f = new Float32Array(buf);
    this.words.forEach((w, k) => {
      const kind = this.kinds[k];
      if (kind === "u") u[k] = w;
      else if (kind === "i") i[k] = w;
      else f[k] = w;
    });
    return new Uint8Array(buf);
  }
}
