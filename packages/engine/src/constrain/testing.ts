// Test helpers for the JSON constraint: a validator for the supported JSON Schema subset (written apart from
// the compiler, as the independent check), random JSON values that fit a schema, and a random-policy driver.
import type { Rng } from "@webart/gpu";
import type { JsonConstraint } from "./json.ts";
import type { ToolSpecLike } from "./tool.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function deref(s: Json, root: Json): Json {
  while (typeof s.$ref === "string") {
    const [, section, name] = /^#(?:\/([^/]+)\/(.+))?$/.exec(s.$ref)!;
    s = (section ? (root[section] as Json)[name] : root) as Json;
  }
  return s;
}

function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v === "object" ? "object" : typeof v;
}

/** Why `v` does not fit `schema` (null when it does). */
export function validate(v: unknown, schema: Json | boolean, root: Json = schema as Json, path = "$"): string | null {
  if (schema === true) return null;
  if (schema === false) return `${path}: schema false`;
  const s = deref(schema, root);
  if (s.nullable === true && v === null) return null;
  for (const k of ["anyOf", "oneOf", "allOf"] as const) {
    if (!Array.isArray(s[k])) continue;
    const fits = (s[k] as Json[]).filter((o) => validate(v, o, root, path) === null).length;
    const n = (s[k] as Json[]).length;
    if (k === "anyOf" ? fits === 0 : k === "oneOf" ? fits !== 1 : fits !== n)
      return `${path}: ${fits} of ${n} ${k} branches fit ${JSON.stringify(v)}`;
  }
  if ("const" in s && JSON.stringify(s.const) !== JSON.stringify(v)) return `${path}: not the const`;
  if (Array.isArray(s.enum) && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)))
    return `${path}: ${JSON.stringify(v)} not in enum`;
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const t = typeOf(v);
    if (!types.includes(t) && !(t === "integer" && types.includes("number"))) return `${path}: ${t}, expected ${types}`;
  }
  if (typeof v === "string") {
    const n = [...v].length;
    if (typeof s.maxLength === "number" && n > s.maxLength) return `${path}: length ${n} > ${s.maxLength}`;
    if (typeof s.minLength === "number" && n < s.minLength) return `${path}: length ${n} < ${s.minLength}`;
  }
  if (typeof v === "number") {
    const exMin = s.exclusiveMinimum;
    const exMax = s.exclusiveMaximum;
    const min = s.minimum as number | undefined;
    const max = s.maximum as number | undefined;
    if (min !== undefined && (exMin === true ? v <= min : v < min)) return `${path}: ${v} below minimum ${min}`;
    if (max !== undefined && (exMax === true ? v >= max : v > max)) return `${path}: ${v} above maximum ${max}`;
    if (typeof exMin === "number" && v <= exMin) return `${path}: ${v} <= exclusiveMinimum ${exMin}`;
    if (typeof exMax === "number" && v >= exMax) return `${path}: ${v} >= exclusiveMaximum ${exMax}`;
  }
  if (Array.isArray(v)) {
    if (typeof s.maxItems === "number" && v.length > s.maxItems) return `${path}: ${v.length} items > ${s.maxItems}`;
    if (typeof s.minItems === "number" && v.length < s.minItems) return `${path}: ${v.length} items < ${s.minItems}`;
    for (let i = 0; i < v.length; i++) {
      const e = validate(v[i], (s.items as Json | boolean | undefined) ?? true, root, `${path}[${i}]`);
      if (e) return e;
    }
  }
  if (isObj(v)) {
    const props = (s.properties ?? {}) as Json;
    for (const r of (s.required ?? []) as string[]) if (!(r in v)) return `${path}: missing ${r}`;
    for (const [k, x] of Object.entries(v)) {
      const sub = k in props ? (props[k] as Json) : ((s.additionalProperties ?? true) as Json | boolean);
      const e = validate(x, sub, root, `${path}.${k}`);
      if (e) return e;
    }
  }
  return null;
}

/** A random value that fits `schema` (strings of printable and non-ASCII characters, small numbers). */
export function randomValue(schema: Json | boolean, rng: Rng, root: Json = schema as Json, depth = 0): unknown {
  if (schema === true || Object.keys(schema).length === 0)
    return randomValue({ type: ["string", "number", "boolean", "null"] }, rng, root, depth);
  const s = deref(schema as Json, root);
  const pick = <T>(xs: T[]): T => xs[rng.int(xs.length)];
  if (s.nullable === true && rng.next() < 0.3) return null;
  if (Array.isArray(s.anyOf ?? s.oneOf ?? s.allOf))
    return randomValue(pick((s.anyOf ?? s.oneOf ?? s.allOf) as Json[]), rng, root, depth);
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) {
    const { enum: values, ...rest } = s;
    return pick((values as unknown[]).filter((v) => validate(v, rest, root) === null));
  }
  const type = Array.isArray(s.type) ? pick(s.type as string[]) : ((s.type as string | undefined) ?? "object");
  switch (type) {
    case "string": {
      const min = (s.minLength as number | undefined) ?? 0;
      const max = (s.maxLength as number | undefined) ?? min + 12;
      const n = min + rng.int(Math.min(max - min, 12) + 1);
      const alphabet = [...'abc XYZ09_-.,:;{}[]"\\/\n\té你好🎉ß€'];
      return Array.from({ length: n }, () => pick(alphabet)).join("");
    }
    case "integer":
    case "number": {
      const lo = (s.minimum ?? s.exclusiveMinimum) as number | undefined;
      const hi = (s.maximum ?? s.exclusiveMaximum) as number | undefined;
      if (lo !== undefined || hi !== undefined) {
        // Bounded: a value strictly inside, on a grid of 1 (integers) or 0.25.
        const a = lo ?? (hi as number) - 1000;
        const z = hi ?? a + 1000;
        const step = type === "integer" ? 1 : 0.25;
        const first = Math.floor(a / step) + 1;
        const last = Math.ceil(z / step) - 1;
        return (first + rng.int(Math.max(1, last - first + 1))) * step;
      }
      if (type === "integer") return rng.int(2001) - 1000;
      return pick([0, -1, 3.25, 1e21, -2.5e-7, 123456.75, rng.int(100)]);
    }
    case "boolean":
      return rng.next() < 0.5;
    case "null":
      return null;
    case "array": {
      const min = (s.minItems as number | undefined) ?? 0;
      const max = Math.min((s.maxItems as number | undefined) ?? 3, min + 3);
      const n = depth > 3 ? min : min + rng.int(max - min + 1);
      return Array.from({ length: n }, () => randomValue((s.items as Json | undefined) ?? true, rng, root, depth + 1));
    }
    default: {
      const out: Json = {};
      const props = (s.properties ?? {}) as Json;
      const required = new Set((s.required ?? []) as string[]);
      for (const [k, sub] of Object.entries(props))
        if (required.has(k) || (depth < 3 && rng.next() < 0.5)) out[k] = randomValue(sub as Json, rng, root, depth + 1);
      return out;
    }
  }
}

export interface Drive {
  ids: number[];
  /** "eos": the policy picked an end token; "done": the constraint reported completion. */
  end: "eos" | "done" | "stuck" | "limit";
  /** Steps whose mask allowed an end token. */
  eosSteps: number[];
}

/** A uniformly random set bit of `mask`, or -1 when none is set. */
export function randomAllowed(mask: Uint32Array, rng: Rng): number {
  let total = 0;
  for (let w = 0; w < mask.length; w++) total += popcount(mask[w]);
  if (total === 0) return -1;
  let k = rng.int(total);
  for (let w = 0; w < mask.length; w++) {
    const p = popcount(mask[w]);
    if (k >= p) {
      k -= p;
      continue;
    }
    for (let b = 0; b < 32; b++) if ((mask[w] >>> b) & 1 && k-- === 0) return w * 32 + b;
  }
  return -1;
}

export const isAllowed = (mask: Uint32Array, id: number) => ((mask[id >>> 5] >>> (id & 31)) & 1) === 1;

/**
 * Runs a random policy: each step picks uniformly among the allowed tokens. Every `checkEvery` steps it also
 * checks `probe` random token ids: the mask (trie walk, string fast path, cache) must agree with feeding the
 * token to a fork of the state byte by byte.
 */
export function drive(
  c: JsonConstraint,
  rng: Rng,
  opts: { eosIds: number[]; maxSteps: number; probe?: number; checkEvery?: number; vocab: number },
): Drive {
  const ids: number[] = [];
  const eosSteps: number[] = [];
  for (let step = 0; step < opts.maxSteps; step++) {
    const mask = c.allowed();
    if (opts.eosIds.some((e) => isAllowed(mask, e))) eosSteps.push(step);
    if (opts.probe && step % (opts.checkEvery ?? 1) === 0) {
      for (let i = 0; i < opts.probe; i++) {
        const id = i % 2 ? rng.int(opts.vocab) : Math.max(0, randomAllowed(mask, rng));
        if (opts.eosIds.includes(id)) continue;
        const f = c.fork();
        f.accept(id);
        if (isAllowed(mask, id) === f.failed)
          throw new Error(`mask and accept disagree on token ${id} at step ${step}`);
      }
    }
    const id = randomAllowed(mask, rng);
    if (id < 0) return { ids, end: "stuck", eosSteps };
    if (opts.eosIds.includes(id)) return { ids, end: "eos", eosSteps };
    ids.push(id);
    c.accept(id);
    if (c.failed) throw new Error(`token ${id} was allowed but accept failed at step ${step}`);
    if (c.done()) return { ids, end: "done", eosSteps };
  }
  return { ids, end: "limit", eosSteps };
}

/** Schemas the tests drive, one per feature of the supported subset. */
export const SCHEMAS: Record<string, Json> = {
  person: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 12 },
      age: { type: "integer", minimum: 0 },
      email: { type: ["string", "null"], maxLength: 10 },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 3 },
      role: { enum: ["admin", "user", "guest"] },
      address: {
        type: "object",
        properties: { city: { type: "string", maxLength: 8 }, zip: { type: "string", maxLength: 5 } },
        required: ["city", "zip"],
        additionalProperties: false,
      },
      score: { type: "number" },
      active: { type: "boolean" },
    },
    required: ["name", "age", "email", "tags", "role", "address", "score", "active"],
    additionalProperties: false,
  },
  tree: {
    $ref: "#/$defs/node",
    $defs: {
      node: {
        type: "object",
        properties: {
          value: { type: "integer" },
          children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 },
        },
        required: ["value", "children"],
        additionalProperties: false,
      },
    },
  },
  shape: {
    oneOf: [
      {
        type: "object",
        properties: { kind: { const: "circle" }, r: { type: "number" } },
        required: ["kind", "r"],
        additionalProperties: false,
      },
      {
        type: "object",
        properties: { kind: { const: "rect" }, w: { type: "integer" }, h: { type: "integer" } },
        required: ["kind", "w", "h"],
        additionalProperties: false,
      },
    ],
  },
  literals: { enum: [1, 12, 123, -1.5, true, null, "x", { a: [1, "b"] }] },
  number: { type: "number" },
  words: { type: "array", items: { type: "string", minLength: 2, maxLength: 5 }, minItems: 1, maxItems: 3 },
  optional: {
    type: "object",
    properties: {
      a: { type: "boolean" },
      b: { type: "null" },
      c: { type: "integer" },
      d: { anyOf: [{ type: "string", maxLength: 3 }, { type: "integer" }] },
      e: { type: "boolean", description: "annotations are ignored", title: "E" },
    },
    required: ["b", "d"],
    additionalProperties: false,
  },
  counts: { type: "object", additionalProperties: { type: "integer" } },
  bounds: {
    type: "object",
    properties: {
      dice: { type: "integer", minimum: 1, maximum: 6 },
      below: { type: "integer", exclusiveMaximum: -95, minimum: -120 },
      unit: { type: "number", minimum: 0, maximum: 1 },
      open: { type: "number", exclusiveMinimum: -0.5, exclusiveMaximum: 0.25 },
      big: { type: "integer", minimum: 999_999 },
      legacy: { type: "number", minimum: 2, exclusiveMinimum: true, maximum: 3, exclusiveMaximum: true },
      pick: { type: "integer", enum: [1, 5, 9, 12], maximum: 9 },
    },
    required: ["dice", "below", "unit", "open", "big", "legacy", "pick"],
    additionalProperties: false,
  },
  text: { type: "string", maxLength: 8 },
  any: {},
};

/**
 * Tools shaped as the email env's guided calls over one email body: search_inbox's keywords an enum of its words,
 * return_final_answer's answer an enum of its runs of up to `maxWords` words (or "not found").
 */
export function guidedEmailTools(body: string, maxWords: number): ToolSpecLike[] {
  const words = body.split(/[^A-Za-z0-9$]+/).filter(Boolean);
  const phrases = new Set<string>();
  for (let i = 0; i < words.length; i++)
    for (let n = 1; n <= maxWords && i + n <= words.length; n++) phrases.add(words.slice(i, i + n).join(" "));
  return [
    {
      function: {
        name: "search_inbox",
        parameters: {
          type: "object",
          properties: { keywords: { type: "array", items: { enum: words }, minItems: 1, maxItems: 3 } },
          required: ["keywords"],
          additionalProperties: false,
        },
      },
    },
    {
      function: {
        name: "return_final_answer",
        parameters: {
          type: "object",
          properties: { answer: { enum: ["not found", ...phrases] }, message_id: { enum: ["m9254", "m17", "none"] } },
          required: ["answer", "message_id"],
          additionalProperties: false,
        },
      },
    },
  ];
}

/** Set bits of a 32-bit mask word. */
export function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return (((x + (x >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}
