// The project's one seeded random generator (used by weight init, sampling and tests),
// so every run can be replayed. xoshiro128** with splitmix32 seeding; state is 4 u32.

export class Rng {
  readonly s = new Uint32Array(4);

  constructor(seed: number | Uint32Array = 0) {
    if (typeof seed === "number") {
      let x = seed >>> 0;
      for (let i = 0; i < 4; i++) {
        x = (x + 0x9e3779b9) >>> 0;
        let z = x;
        z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
        z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
        this.s[i] = (z ^ (z >>> 16)) >>> 0;
      }
      if (!(this.s[0] | this.s[1] | this.s[2] | this.s[3])) this.s[0] = 1;
    } else this.s.set(seed);
  }

  /** Uniform u32. */
  nextU32(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1], 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1] << 9) >>> 0;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Uniform in [lo, hi). */
  uniform(lo = -1, hi = 1): number {
    return lo + (hi - lo) * this.next();
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    const u = 1 - this.next();
    const v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** A Float32Array of uniform values in [lo, hi). */
  f32(n: number, lo = -1, hi = 1): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.uniform(lo, hi);
    return a;
  }

  /** A fresh, independent generator derived from this one. */
  fork(): Rng {
    return new Rng(new Uint32Array([this.nextU32(), this.nextU32(), this.nextU32(), this.nextU32() | 1]));
  }

  state(): number[] {
    return [...this.s];
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
