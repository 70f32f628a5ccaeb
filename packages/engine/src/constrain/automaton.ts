// A byte-level pushdown automaton for JSON that fits a compiled schema. States are immutable threads
// (a lexical mode plus a linked stack of open containers), so a trie walk can branch without copying;
// several threads run side by side where the schema is ambiguous (anyOf, enum values that prefix others).
import {
  leaves,
  type ArrayNode,
  type JsonLimits,
  type Leaf,
  type Lit,
  type Node,
  type ObjectNode,
  type StringNode,
} from "./schema.ts";
import { canReach, inBounds } from "./numbers.ts";
import { CONT_RANGE, utf8Lead } from "./vocab.ts";

// Modes.
const VALUE = 0; // a value of `node` is next (after optional whitespace)
const STR = 1; // in a string: a = characters so far, b = escape state, c = pending UTF-8 (need * 8 + kind)
const NUM = 2; // in a number: a = length, b = number state, c = exponent digits; text = the number so far
//                 (kept only for numbers with bounds, which are checked digit by digit)
const LIT = 3; // matching fixed byte strings `lits` at byte a; b = 1 for object keys
const COLON = 4; // after a key: ':' then a value of `node`
const OBJ_FIRST = 5; // after '{'
const OBJ_NEXT = 6; // after a member's value: ',' or '}'
const OBJ_KEY = 7; // after ',' in an object: a key
const ARR_FIRST = 8; // after '['
const ARR_NEXT = 9; // after an item: ',' or ']'
const END = 10; // the top-level value is complete

// Number states; a state is complete when the number may end there.
const N_MINUS = 0;
const N_ZERO = 1;
const N_INT = 2;
const N_DOT = 3;
const N_FRAC = 4;
const N_EXP = 5;
const N_EXP_SIGN = 6;
const N_EXP_DIGITS = 7;
const N_COMPLETE = [false, true, true, false, true, false, false, true];
const MAX_EXPONENT_DIGITS = 2; // keeps every generated number finite

// Escape states inside a string (b): 0 none, 1 after '\', 2..6 = which \u hex digit is next: 2 the first,
// 3 or 4 the second (3: limited to 0-7 after a leading 'd', which rules out surrogate halves), 5, 6.
const E_NONE = 0;
const E_BACKSLASH = 1;

type NumberNode = Extract<Node, { kind: "number" }>;

/** A number thread may end here: its state is complete and, with bounds, its value is inside them. */
function numberEnds(t: Thread): boolean {
  const b = (t.node as NumberNode).bounds;
  return N_COMPLETE[t.b] && (!b || inBounds(b, t.text));
}

const isWs = (x: number) => x === 0x20 || x === 0x0a || x === 0x0d || x === 0x09;
const isDigit = (x: number) => x >= 0x30 && x <= 0x39;
const isHex = (x: number) => isDigit(x) || (x >= 0x61 && x <= 0x66) || (x >= 0x41 && x <= 0x46);

/** An open object or array, and how far it is filled. Immutable; `key` is computed once. */
export class Frame {
  private k: string | undefined;
  constructor(
    readonly node: ObjectNode | ArrayNode,
    /** Object: index of the first property that may still come. Array: items so far. */
    readonly i: number,
    /** Object: members so far. */
    readonly n: number,
    readonly depth: number,
    readonly up: Frame | null,
  ) {}
  get key(): string {
    return (this.k ??= `${this.node.id}.${this.i}.${this.n}/${this.up ? this.up.key : ""}`);
  }
}

export class Thread {
  constructor(
    readonly m: number,
    readonly node: Node | null,
    readonly frame: Frame | null,
    readonly a = 0,
    readonly b = 0,
    readonly c = 0,
    readonly ws = 0,
    readonly lits: Lit[] | null = null,
    readonly text = "",
  ) {}

  /** Identifies the state (equal keys = equal futures); used to dedupe threads and cache masks. */
  get key(): string {
    const lits = this.lits ? this.lits.map((l) => l.id).join(".") : "";
    return `${this.m},${this.node ? this.node.id : -1},${this.a},${this.b},${this.c},${this.ws},${lits},${this.text}|${this.frame ? this.frame.key : ""}`;
  }

  /** A string body with no escape or character in progress: plain tokens (vocab.ts) extend it by their length. */
  get inPlainString(): boolean {
    return this.m === STR && this.b === E_NONE && this.c === 0;
  }

  /** Characters the string may still take (for inPlainString threads). */
  get room(): number {
    return (this.node as StringNode).max - this.a;
  }

  /** The JSON value is complete here, so the sequence may end. */
  get complete(): boolean {
    return this.m === END || (this.m === NUM && this.frame === null && numberEnds(this));
  }

  get finished(): boolean {
    return this.m === END;
  }
}

export class Automaton {
  constructor(private readonly limits: JsonLimits) {}

  /** The state before any output: a value of `root`, with no leading whitespace. */
  initial(root: Node): Thread {
    return new Thread(VALUE, root, null, 0, 0, 0, this.limits.maxWhitespace);
  }

  /** Pushes every thread that `t` becomes after byte x (none when x is invalid there). */
  step(t: Thread, x: number, out: Thread[]): void {
    const f = t.frame;
    if (isWs(x) && t.m !== STR && t.m !== NUM && t.m !== LIT && t.m !== END) {
      if (t.ws < this.limits.maxWhitespace) out.push(new Thread(t.m, t.node, f, t.a, t.b, t.c, t.ws + 1));
      return;
    }
    switch (t.m) {
      case VALUE:
        for (const leaf of leaves(t.node!)) this.start(leaf, x, f, out);
        return;
      case STR:
        return this.string(t, x, out);
      case NUM:
        return this.number(t, x, out);
      case LIT:
        return this.literal(t.lits!, t.a, x, f, t.b === 1, out);
      case COLON:
        if (x === 0x3a) out.push(new Thread(VALUE, t.node, f));
        return;
      case OBJ_FIRST:
      case OBJ_KEY: {
        const obj = f!.node as ObjectNode;
        if (x === 0x22) {
          if (obj.free) {
            if (this.moreMembers(f!)) out.push(new Thread(STR, this.keyString(obj), f));
          } else this.literal(this.nextKeys(f!), 0, x, f, true, out);
        } else if (x === 0x7d && t.m === OBJ_FIRST && this.canClose(f!)) out.push(this.after(f!.up));
        return;
      }
      case OBJ_NEXT:
        if (x === 0x2c && this.moreMembers(f!)) out.push(new Thread(OBJ_KEY, null, f));
        else if (x === 0x7d && this.canClose(f!)) out.push(this.after(f!.up));
        return;
      case ARR_FIRST: {
        const arr = f!.node as ArrayNode;
        if (x === 0x5d) {
          if (arr.min === 0) out.push(this.after(f!.up));
        } else if (arr.max > 0 && this.fits(arr.items, f!.depth)) {
          const g = new Frame(arr, 1, 0, f!.depth, f!.up);
          for (const leaf of leaves(arr.items)) this.start(leaf, x, g, out);
        }
        return;
      }
      case ARR_NEXT: {
        const arr = f!.node as ArrayNode;
        if (x === 0x2c && f!.i < arr.max && this.fits(arr.items, f!.depth))
          out.push(new Thread(VALUE, arr.items, new Frame(arr, f!.i + 1, 0, f!.depth, f!.up)));
        else if (x === 0x5d && f!.i >= arr.min) out.push(this.after(f!.up));
        return;
      }
    }
  }

  /** The state after a value ends inside `frame` (null: at top level). */
  private after(frame: Frame | null): Thread {
    if (!frame) return new Thread(END, null, null);
    return new Thread(frame.node.kind === "object" ? OBJ_NEXT : ARR_NEXT, null, frame);
  }

  /** Whether a value of `node` can still be completed inside containers `depth` deep. */
  private fits(node: Node, depth: number): boolean {
    return depth + node.need <= this.limits.maxDepth;
  }

  /** The keys that may come next in a declared-properties object (those whose values fit in depth). */
  private nextKeys(f: Frame): Lit[] {
    const obj = f.node as ObjectNode;
    const lits = obj.keyLits[f.i];
    return lits.every((l) => this.fits(obj.props[l.tag].node, f.depth))
      ? lits
      : lits.filter((l) => this.fits(obj.props[l.tag].node, f.depth));
  }

  /** Whether another member may follow (',' or a first key). */
  private moreMembers(f: Frame): boolean {
    const obj = f.node as ObjectNode;
    if (obj.free) return f.n < this.limits.maxProperties && this.fits(obj.free, f.depth);
    return this.nextKeys(f).length > 0;
  }

  private canClose(f: Frame): boolean {
    const obj = f.node as ObjectNode;
    return obj.free !== null || obj.canClose[f.i];
  }

  /** The string node for free-form keys of `obj` (one per object node, cached on it). */
  private keyString(obj: ObjectNode): StringNode {
    const o = obj as ObjectNode & { keyNode?: StringNode };
    return (o.keyNode ??= {
      kind: "string",
      id: -2 - obj.id,
      need: 0,
      min: 0,
      max: this.limits.maxStringLength,
      key: true,
    });
  }

  /** The first byte of a value of `leaf` inside `frame`. */
  private start(leaf: Leaf, x: number, f: Frame | null, out: Thread[]): void {
    const depth = f ? f.depth : 0;
    switch (leaf.kind) {
      case "object":
        if (x === 0x7b && this.fits(leaf, depth))
          out.push(new Thread(OBJ_FIRST, null, new Frame(leaf, 0, 0, depth + 1, f)));
        return;
      case "array":
        if (x === 0x5b && this.fits(leaf, depth))
          out.push(new Thread(ARR_FIRST, null, new Frame(leaf, 0, 0, depth + 1, f)));
        return;
      case "string":
        if (x === 0x22) out.push(new Thread(STR, leaf, f));
        return;
      case "number": {
        const t = new Thread(NUM, leaf, f);
        if (x === 0x2d) this.numberTo(t, x, N_MINUS, 0, out);
        else if (x === 0x30) this.numberTo(t, x, N_ZERO, 0, out);
        else if (isDigit(x)) this.numberTo(t, x, N_INT, 0, out);
        return;
      }
      case "literal":
        return this.literal(leaf.lits, 0, x, f, false, out);
    }
  }

  private literal(lits: Lit[], pos: number, x: number, f: Frame | null, key: boolean, out: Thread[]): void {
    let more: Lit[] | null = null;
    let done: Lit | null = null;
    for (const l of lits) {
      if (l.bytes[pos] !== x) continue;
      if (l.bytes.length === pos + 1) done = l;
      else (more ??= []).push(l);
    }
    if (more) out.push(new Thread(LIT, null, f, pos + 1, key ? 1 : 0, 0, 0, more));
    if (!done) return;
    if (!key) out.push(this.after(f));
    else {
      const obj = f!.node as ObjectNode;
      out.push(new Thread(COLON, obj.props[done.tag].node, new Frame(obj, done.tag + 1, f!.n + 1, f!.depth, f!.up)));
    }
  }

  private string(t: Thread, x: number, out: Thread[]): void {
    const node = t.node as StringNode;
    const f = t.frame;
    if (t.c !== 0) {
      // Inside a multi-byte character: only its continuation bytes.
      const [lo, hi] = CONT_RANGE[t.c & 7];
      const need = (t.c >> 3) - 1;
      if (x >= lo && x <= hi) out.push(new Thread(STR, node, f, t.a, E_NONE, need > 0 ? need * 8 : 0));
      return;
    }
    if (t.b === E_BACKSLASH) {
      if (x === 0x75) out.push(new Thread(STR, node, f, t.a, 2));
      else if ('"\\/bfnrt'.includes(String.fromCharCode(x))) out.push(new Thread(STR, node, f, t.a, E_NONE));
      return;
    }
    if (t.b >= 2) {
      // \u escapes: four hex digits, no surrogate halves (D800-DFFF).
      if (!isHex(x)) return;
      if (t.b === 2) out.push(new Thread(STR, node, f, t.a, x === 0x64 || x === 0x44 ? 3 : 4));
      else if (t.b === 3) {
        if (x <= 0x37) out.push(new Thread(STR, node, f, t.a, 5));
      } else out.push(new Thread(STR, node, f, t.a, t.b === 4 ? 5 : t.b === 5 ? 6 : E_NONE));
      return;
    }
    if (x === 0x22) {
      if (t.a < node.min) return;
      if (!node.key) out.push(this.after(f));
      else {
        const obj = f!.node as ObjectNode;
        out.push(new Thread(COLON, obj.free, new Frame(obj, 0, f!.n + 1, f!.depth, f!.up)));
      }
      return;
    }
    if (x < 0x20 || t.a >= node.max) return;
    if (x === 0x5c) out.push(new Thread(STR, node, f, t.a + 1, E_BACKSLASH));
    else if (x < 0x80) out.push(new Thread(STR, node, f, t.a + 1));
    else {
      const lead = utf8Lead(x);
      if (lead >= 0) out.push(new Thread(STR, node, f, t.a + 1, E_NONE, lead));
    }
  }

  private number(t: Thread, x: number, out: Thread[]): void {
    const node = t.node as NumberNode;
    // Numbers with bounds are written without an exponent, so that the digits alone decide the value.
    const real = !node.integer;
    const exp = (x === 0x65 || x === 0x45) && !node.bounds;
    switch (t.b) {
      case N_MINUS:
        if (isDigit(x)) this.numberTo(t, x, x === 0x30 ? N_ZERO : N_INT, 0, out);
        return;
      case N_DOT:
        if (isDigit(x)) this.numberTo(t, x, N_FRAC, 0, out);
        return;
      case N_EXP:
        if (x === 0x2b || x === 0x2d) this.numberTo(t, x, N_EXP_SIGN, 0, out);
        else if (isDigit(x)) this.numberTo(t, x, N_EXP_DIGITS, 1, out);
        return;
      case N_EXP_SIGN:
        if (isDigit(x)) this.numberTo(t, x, N_EXP_DIGITS, 1, out);
        return;
      case N_ZERO:
      case N_INT:
      case N_FRAC:
        if (isDigit(x) && t.b !== N_ZERO) return this.numberTo(t, x, t.b, 0, out);
        if (x === 0x2e && real && t.b !== N_FRAC) return this.numberTo(t, x, N_DOT, 0, out);
        if (exp && real) return this.numberTo(t, x, N_EXP, 0, out);
        break;
      case N_EXP_DIGITS:
        if (isDigit(x)) {
          if (t.c < MAX_EXPONENT_DIGITS) this.numberTo(t, x, N_EXP_DIGITS, t.c + 1, out);
          return;
        }
        break;
    }
    // The number ends here (if its value may); x belongs to what follows it.
    if (numberEnds(t)) this.step(this.after(t.frame), x, out);
  }

  /**
   * Number `t` and one more character x, if the number can still be completed within maxNumberLength (and,
   * with bounds, still reach a value inside them).
   */
  private numberTo(t: Thread, x: number, state: number, expDigits: number, out: Thread[]): void {
    const len = t.m === NUM ? t.a : 0;
    if (len + 1 + (N_COMPLETE[state] ? 0 : 1) > this.limits.maxNumberLength) return;
    const node = t.node as NumberNode;
    if (!node.bounds) {
      out.push(new Thread(NUM, node, t.frame, len + 1, state, expDigits));
      return;
    }
    const text = (t.m === NUM ? t.text : "") + String.fromCharCode(x);
    if (canReach(node.bounds, text, this.limits.maxNumberLength - len - 1, node.integer))
      out.push(new Thread(NUM, node, t.frame, len + 1, state, expDigits, 0, null, text));
  }
}
