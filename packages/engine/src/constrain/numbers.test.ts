// Numeric bounds against brute force: every number text up to a small length, every prefix of it.
import { describe, expect, it } from "vitest";
import { canReach, inBounds, toDec, valueInBounds, type NumberBounds } from "./numbers.ts";

const L = 5;
const NUMBER = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;
const INTEGER = /^-?(0|[1-9][0-9]*)$/;

/** Every string of '-', '.', digits up to length L, and the complete numbers among them. */
const texts: string[] = [];
for (let frontier = [""], n = 0; n < L; n++) {
  const next: string[] = [];
  for (const t of frontier) for (const c of "-.0123456789") next.push(t + c);
  for (const t of next) texts.push(t);
  frontier = next;
}

/** The prefixes the automaton can be in: a valid start of a number (no exponent). */
const starts = texts.filter((t) => /^-?(0|[1-9][0-9]*)?(\.[0-9]*)?$/.test(t) && !/^-?\./.test(t));

const bounds = (lo: number | null, loEx: boolean, hi: number | null, hiEx: boolean): NumberBounds => ({
  lo: lo === null ? null : toDec(lo),
  loExclusive: loEx,
  hi: hi === null ? null : toDec(hi),
  hiExclusive: hiEx,
});

const CASES: [string, NumberBounds][] = [
  ["[1, 6]", bounds(1, false, 6, false)],
  ["(-0.5, 0.25)", bounds(-0.5, true, 0.25, true)],
  ["[-120, -95)", bounds(-120, false, -95, true)],
  ["[0.1, inf)", bounds(0.1, false, null, false)],
  ["(-inf, -3.25]", bounds(null, false, -3.25, false)],
  ["[0, 0]", bounds(0, false, 0, false)],
  ["[150, 200]", bounds(150, false, 200, false)],
  ["(2.5, 2.75)", bounds(2.5, true, 2.75, true)],
];

describe("number bounds", () => {
  for (const [name, b] of CASES)
    for (const integer of [false, true])
      it(`${integer ? "integers" : "numbers"} in ${name}: canReach and inBounds agree with enumeration`, () => {
        const shape = integer ? INTEGER : NUMBER;
        const inside = (t: string) => {
          const v = Number(t);
          const lo = b.lo && Number(`${b.lo.m}e-${b.lo.e}`);
          const hi = b.hi && Number(`${b.hi.m}e-${b.hi.e}`);
          return (
            (lo === null || (b.loExclusive ? v > lo : v >= lo)) && (hi === null || (b.hiExclusive ? v < hi : v <= hi))
          );
        };
        const good = texts.filter((t) => shape.test(t) && inside(t));
        const prefixes = new Set(good.flatMap((t) => Array.from({ length: t.length }, (_, i) => t.slice(0, i + 1))));
        const wrong: string[] = [];
        for (const t of starts) {
          if (integer && t.includes(".")) continue;
          if (canReach(b, t, L - t.length, integer) !== prefixes.has(t)) wrong.push(`canReach ${t}`);
          if (shape.test(t) && inBounds(b, t) !== inside(t)) wrong.push(`inBounds ${t}`);
        }
        expect(wrong).toEqual([]);
      });

  it("reads doubles as the decimals they print as", () => {
    expect(toDec(0.1)).toEqual({ m: 1n, e: 1 });
    expect(toDec(-2.5e-7)).toEqual({ m: -25n, e: 8 });
    expect(toDec(1e21)).toEqual({ m: 10n ** 21n, e: 0 });
    expect(valueInBounds(bounds(0.1, false, null, false), 0.1)).toBe(true);
    expect(valueInBounds(bounds(0.1, true, null, false), 0.1)).toBe(false);
    expect(valueInBounds(bounds(-1, false, 1, false), -1.5)).toBe(false);
  });
});
