// Numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) for the JSON automaton: given the
// characters of a number so far, can it still end inside the bounds within the length limit? Exact decimal
// arithmetic on BigInt, so bounds like 0.1 mean 0.1 and not the nearest double.

/** An exact decimal m * 10^-e (e >= 0). */
export interface Dec {
  m: bigint;
  e: number;
}

export interface NumberBounds {
  lo: Dec | null;
  loExclusive: boolean;
  hi: Dec | null;
  hiExclusive: boolean;
}

/** The exact decimal a finite double prints as (its shortest round-trip form, as JSON writes it). */
export function toDec(x: number): Dec {
  const [mant, exp = "0"] = String(x).toLowerCase().split("e");
  const neg = mant.startsWith("-");
  const [int, frac = ""] = (neg ? mant.slice(1) : mant).split(".");
  let m = BigInt(int + frac) * (neg ? -1n : 1n);
  let e = frac.length - Number(exp);
  if (e < 0) {
    m *= 10n ** BigInt(-e);
    e = 0;
  }
  return { m, e };
}

const pow10 = (n: number) => 10n ** BigInt(n);

/** floor and ceil of d * 10^f. */
function scaled(d: Dec, f: number): { floor: bigint; ceil: bigint } {
  if (f >= d.e) {
    const v = d.m * pow10(f - d.e);
    return { floor: v, ceil: v };
  }
  const den = pow10(d.e - f);
  const q = d.m / den; // truncated toward zero
  const r = d.m % den;
  return { floor: r < 0n ? q - 1n : q, ceil: r > 0n ? q + 1n : q };
}

/** Whether some integer m in [a, b] gives sign * m / 10^f inside the bounds. */
function hits(b: NumberBounds, neg: boolean, f: number, a: bigint, z: bigint): boolean {
  let lo = a;
  let hi = z;
  if (!neg) {
    if (b.lo) {
      const s = scaled(b.lo, f);
      lo = max(lo, b.loExclusive ? s.floor + 1n : s.ceil);
    }
    if (b.hi) {
      const s = scaled(b.hi, f);
      hi = min(hi, b.hiExclusive ? s.ceil - 1n : s.floor);
    }
  } else {
    // value = -m / 10^f: value >= lo  <=>  m <= -lo * 10^f, and value <= hi  <=>  m >= -hi * 10^f.
    if (b.lo) {
      const s = scaled(b.lo, f);
      hi = min(hi, b.loExclusive ? -s.floor - 1n : -s.ceil);
    }
    if (b.hi) {
      const s = scaled(b.hi, f);
      lo = max(lo, b.hiExclusive ? -s.ceil + 1n : -s.floor);
    }
  }
  return lo <= hi;
}

const max = (a: bigint, b: bigint) => (a > b ? a : b);
const min = (a: bigint, b: bigint) => (a < b ? a : b);

/** A number prefix as the automaton writes it: sign, integer digits, and fraction digits after a '.'. */
function split(text: string): { neg: boolean; int: string; dot: boolean; frac: string } {
  const neg = text.startsWith("-");
  const body = neg ? text.slice(1) : text;
  const dot = body.indexOf(".");
  return dot < 0
    ? { neg, int: body, dot: false, frac: "" }
    : { neg, int: body.slice(0, dot), dot: true, frac: body.slice(dot + 1) };
}

/**
 * Whether `text` (a prefix of a plain JSON number: no exponent) can be completed with at most `room` more
 * characters into a number inside the bounds (an integer when `integer`).
 */
export function canReach(b: NumberBounds, text: string, room: number, integer: boolean): boolean {
  const { neg, int, dot, frac } = split(text);
  if (dot) {
    // Fixed integer part; g more fraction digits (at least one in all). The most digits the room allows
    // reach every value fewer digits reach (trailing zeros), so only g = room is checked.
    if (frac.length + room < 1) return false;
    const base = BigInt(int + frac) * pow10(room);
    return hits(b, neg, frac.length + room, base, base + pow10(room) - 1n);
  }
  // j more integer digits, then (for numbers) a '.' and as many fraction digits as the room leaves.
  for (let j = 0; j <= room; j++) {
    if (int === "0" && j > 0) break; // no leading zeros
    const digits = int.length + j;
    if (digits === 0) continue;
    const f = integer ? 0 : Math.max(0, room - j - 1);
    let a: bigint;
    let z: bigint;
    if (int === "") {
      // No digit yet: one digit is 0-9, more start with 1-9.
      a = digits === 1 ? 0n : pow10(digits - 1);
      z = pow10(digits) - 1n;
    } else {
      a = BigInt(int) * pow10(j);
      z = a + pow10(j) - 1n;
    }
    if (hits(b, neg, f, a * pow10(f), (z + 1n) * pow10(f) - 1n)) return true;
  }
  return false;
}

/** Whether the complete number `text` is inside the bounds. */
export function inBounds(b: NumberBounds, text: string): boolean {
  const { neg, int, frac } = split(text);
  const m = BigInt(int + frac);
  return hits(b, neg, frac.length, m, m);
}

/** Whether the double x is inside the bounds (for enum and const values). */
export function valueInBounds(b: NumberBounds, x: number): boolean {
  const d = toDec(x);
  const neg = d.m < 0n;
  const m = neg ? -d.m : d.m;
  return hits(b, neg, d.e, m, m);
}
