// Compiles a JSON Schema (the subset structured-output users send) into the grammar nodes the JSON automaton
// walks. Keywords that would change validity but cannot be enforced are an error naming keyword and path.
//
// What gets generated (always valid against the schema, not every valid document):
// - objects with declared properties: those properties in declared order, required ones always, optional
//   ones optionally; no other members even where additionalProperties allows them (as OpenAI strict mode).
//   Objects without declared properties (and additionalProperties not false) are free-form: any string keys,
//   values of the additionalProperties schema.
// - strings: strict UTF-8, escapes but no surrogate \u escapes; min/maxLength count code points.
// - numbers: JSON numbers of at most maxNumberLength characters, exponents of at most 2 digits; integers as
//   plain digits. minimum/maximum/exclusiveMinimum/exclusiveMaximum are enforced digit by digit (numbers
//   with bounds are written without an exponent).
// - enum/const: each value in its compact JSON.stringify form, those that fit the sibling type, length and
//   bounds keywords. oneOf is generated as anyOf.
// - no type: the kind its keywords imply (properties -> object, items -> array, ...), else any value.
// Every other keyword is an error naming it and its path, unless it is an annotation (title, description, ...):
// nothing that changes validity is ignored.

import { canReach, toDec, valueInBounds, type NumberBounds } from "./numbers.ts";

/** Bounds that keep every generation finite; the schema's own bounds win where it sets them. */
export interface JsonLimits {
  /** Characters per string when the schema sets no maxLength (also free-form object keys). */
  maxStringLength: number;
  /** Characters per number (sign, digits, '.', exponent). */
  maxNumberLength: number;
  /** Whitespace bytes allowed in each gap between JSON tokens (0 = compact JSON only). */
  maxWhitespace: number;
  /** Items per array when the schema sets no maxItems. */
  maxItems: number;
  /** Members of a free-form object (no declared properties). */
  maxProperties: number;
  /** Open objects/arrays at once; deeper containers are not allowed (bounds recursive $refs). */
  maxDepth: number;
}

export const DEFAULT_LIMITS: JsonLimits = {
  maxStringLength: 256,
  maxNumberLength: 16,
  maxWhitespace: 1,
  maxItems: 64,
  maxProperties: 64,
  maxDepth: 16,
};

/** A fixed byte string (a key with its quotes, or a value from enum/const); tag = property index for keys. */
export interface Lit {
  id: number;
  bytes: Uint8Array;
  tag: number;
}

export interface Prop {
  key: string;
  node: Node;
  required: boolean;
}

/** need: the fewest nested objects/arrays a value of the node must open (Infinity: none is finite). */
export type Node = { id: number; need: number } & (
  | { kind: "object"; props: Prop[]; free: Node | null; keyLits: Lit[][]; canClose: boolean[] }
  | { kind: "array"; items: Node; min: number; max: number }
  | { kind: "string"; min: number; max: number; key: boolean }
  | { kind: "number"; integer: boolean; bounds: NumberBounds | null }
  | { kind: "literal"; lits: Lit[] }
  | { kind: "union"; options: Node[] }
  | { kind: "ref"; ref: string; target: Node | null }
);

export type Leaf = Exclude<Node, { kind: "union" } | { kind: "ref" }>;
export type ObjectNode = Extract<Node, { kind: "object" }>;
export type ArrayNode = Extract<Node, { kind: "array" }>;
export type StringNode = Extract<Node, { kind: "string" }>;

/** A schema the constraint cannot enforce; `keyword` and `path` (e.g. "#/properties/zip") say where. */
export class JsonSchemaError extends Error {
  constructor(
    message: string,
    readonly keyword: string | null,
    readonly path: string,
  ) {
    super(message);
    this.name = "JsonSchemaError";
  }
}

/** Keywords that restrict validity in ways this compiler cannot enforce, and what to do instead. */
const UNSUPPORTED: Record<string, string> = {
  pattern: "regular expressions cannot be enforced; use enum or drop it",
  format: "formats (date-time, email, uuid, ...) cannot be enforced; say the format in description instead",
  patternProperties: "regular expressions cannot be enforced",
  propertyNames: "key constraints are not supported",
  minProperties: "use required properties instead",
  maxProperties: "use declared properties with additionalProperties false",
  dependentRequired: "conditional requirements are not supported",
  dependentSchemas: "conditional schemas are not supported",
  dependencies: "conditional requirements are not supported",
  not: "negation is not supported",
  if: "conditional schemas are not supported",
  then: "conditional schemas are not supported",
  else: "conditional schemas are not supported",
  contains: "use items instead",
  minContains: "use items instead",
  maxContains: "use items instead",
  uniqueItems: "uniqueness cannot be enforced while generating",
  multipleOf: "divisibility is not supported; use enum",
  prefixItems: "tuples are not supported; use an object",
  additionalItems: "tuples are not supported; use an object",
  unevaluatedProperties: "not supported",
  unevaluatedItems: "not supported",
  $dynamicRef: "use $ref",
  $recursiveRef: "use $ref",
};

/** Keywords that never change what is valid (annotations; `discriminator` only names oneOf's branches). */
const ANNOTATIONS = new Set([
  "title",
  "description",
  "$schema",
  "$id",
  "$comment",
  "$anchor",
  "examples",
  "default",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$defs",
  "definitions",
  "contentEncoding",
  "contentMediaType",
  "discriminator",
  "strict",
]);

/** Keywords the compiler enforces. */
const ENFORCED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "enum",
  "const",
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
  "nullable",
]);

/** What enum and const may stand beside (their values are filtered by these); anything else is refused there. */
const BESIDE_ENUM = new Set([
  "type",
  "minLength",
  "maxLength",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minItems",
  "maxItems",
]);

const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"];
const utf8 = new TextEncoder();
type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const ptr = (s: string) => s.replace(/~/g, "~0").replace(/\//g, "~1");

/** The compiled grammar. */
export interface Grammar {
  root: Node;
}

/** Compiles a schema; null means json_object (any JSON object). Throws JsonSchemaError. */
export function compileSchema(schema: Json | null, limits: JsonLimits): Grammar {
  let ids = 0;
  let litIds = 0;
  const lit = (text: string, tag = -1): Lit => ({ id: litIds++, bytes: utf8.encode(text), tag });
  const str = (min: number, max: number, key = false): Node => ({ kind: "string", id: ids++, need: 0, min, max, key });
  const union = (options: Node[]): Node => ({ kind: "union", id: ids++, need: 0, options });
  const literals = (values: unknown[]): Node => ({
    kind: "literal",
    id: ids++,
    need: 0,
    lits: [...new Set(values.map((v) => JSON.stringify(v)))].map((t) => lit(t)),
  });
  const object = (props: Prop[], free: Node | null): Node => {
    const keyLits: Lit[][] = [];
    const canClose: boolean[] = [];
    for (let i = 0; i <= props.length; i++) {
      // Declared order: the next key is any property from i up to the first required one.
      const next: Lit[] = [];
      let j = i;
      for (; j < props.length; j++) {
        next.push(lit(JSON.stringify(props[j].key), j));
        if (props[j].required) break;
      }
      keyLits.push(next);
      canClose.push(j >= props.length);
    }
    return { kind: "object", id: ids++, need: 0, props, free, keyLits, canClose };
  };

  // "Any JSON value", built once, and free-form containers of it.
  const any = union([]);
  const anyObject = object([], any);
  const anyArray: Node = { kind: "array", id: ids++, need: 0, items: any, min: 0, max: limits.maxItems };
  (any as { options: Node[] }).options = [
    anyObject,
    anyArray,
    str(0, limits.maxStringLength),
    { kind: "number", id: ids++, need: 0, integer: false, bounds: null },
    literals([true, false, null]),
  ];
  if (schema === null) {
    computeNeeds(anyObject);
    return { root: anyObject };
  }

  const refs = new Map<string, Node>();
  const fail = (keyword: string | null, path: string, why: string): never => {
    throw new JsonSchemaError(`JSON schema: ${keyword ? `"${keyword}" at ${path}` : path}: ${why}`, keyword, path);
  };
  const count = (s: Json, k: string, path: string): number | undefined => {
    const v = s[k];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0)
      fail(k, path, `expected a non-negative integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  /** minimum/maximum and their exclusive forms: numbers (2019+), or booleans beside them (draft 4). */
  const numberBounds = (s: Json, path: string): NumberBounds | null => {
    const num = (k: string): number | undefined => {
      const v = s[k];
      if (v === undefined || typeof v === "boolean") return undefined;
      if (typeof v !== "number" || !Number.isFinite(v)) fail(k, path, `expected a number, got ${JSON.stringify(v)}`);
      return v as number;
    };
    let lo = num("minimum");
    let hi = num("maximum");
    let loEx = s.exclusiveMinimum === true;
    let hiEx = s.exclusiveMaximum === true;
    if (loEx && lo === undefined) fail("exclusiveMinimum", path, "true needs minimum beside it");
    if (hiEx && hi === undefined) fail("exclusiveMaximum", path, "true needs maximum beside it");
    const exLo = num("exclusiveMinimum");
    if (exLo !== undefined && (lo === undefined || exLo >= lo)) [lo, loEx] = [exLo, true];
    const exHi = num("exclusiveMaximum");
    if (exHi !== undefined && (hi === undefined || exHi <= hi)) [hi, hiEx] = [exHi, true];
    if (lo === undefined && hi === undefined) return null;
    return {
      lo: lo === undefined ? null : toDec(lo),
      loExclusive: loEx,
      hi: hi === undefined ? null : toDec(hi),
      hiExclusive: hiEx,
    };
  };
  const resolve = (ref: string, path: string): Node => {
    const hit = refs.get(ref);
    if (hit) return hit;
    const m = /^#(?:\/(\$defs|definitions)\/([^/]+))?$/.exec(ref);
    if (!m)
      return fail(
        "$ref",
        path,
        `${JSON.stringify(ref)} is not supported (only "#", "#/$defs/..." and "#/definitions/...")`,
      );
    const name = m[2]?.replace(/~1/g, "/").replace(/~0/g, "~");
    const defs = m[1] ? schema[m[1]] : undefined;
    const target = name === undefined ? schema : isObj(defs) ? defs[name] : undefined;
    if (target === undefined) return fail("$ref", path, `${JSON.stringify(ref)} does not exist in the schema`);
    // Registered before compiling so recursive references find it; the automaton's depth limit bounds them.
    const node: Node = { kind: "ref", id: ids++, need: 0, ref, target: null };
    refs.set(ref, node);
    node.target = compile(target, ref);
    return node;
  };

  const compile = (s: unknown, path: string): Node => {
    if (s === true) return any;
    if (s === false) return fail(null, path, "the schema false allows no value");
    if (!isObj(s)) return fail(null, path, `expected a schema object, got ${JSON.stringify(s)}`);
    for (const k of Object.keys(s))
      if (Object.hasOwn(UNSUPPORTED, k)) fail(k, path, `not supported (${UNSUPPORTED[k]})`);
      else if (!ENFORCED.has(k) && !ANNOTATIONS.has(k))
        fail(k, path, "is not a keyword this server enforces (remove it, or check its spelling)");
    const validating = Object.keys(s).filter((k) => !ANNOTATIONS.has(k));
    const alone = (k: string) => {
      const other = validating.find((o) => o !== k);
      if (other) fail(other, path, `not supported alongside "${k}" (put it inside the ${k} branches)`);
    };
    if (s.nullable === true) {
      const { nullable: _, ...rest } = s;
      return union([compile(rest, path), literals([null])]);
    }
    if ("$ref" in s) {
      alone("$ref");
      if (typeof s.$ref !== "string") fail("$ref", path, "expected a string");
      return resolve(s.$ref as string, path);
    }
    for (const k of ["anyOf", "oneOf", "allOf"]) {
      if (!(k in s)) continue;
      alone(k);
      const list = s[k];
      if (!Array.isArray(list) || list.length === 0) fail(k, path, "expected a non-empty array of schemas");
      const arr = list as unknown[];
      if (k === "allOf" && arr.length > 1) fail(k, path, "only a single-schema allOf is supported");
      // oneOf is generated as anyOf: the branches users write are almost always disjoint.
      const options = arr.map((o, i) => compile(o, `${path}/${k}/${i}`));
      return options.length === 1 ? options[0] : union(options);
    }
    const type = s.type;
    const types = type === undefined ? null : Array.isArray(type) ? type : [type];
    for (const t of types ?? [])
      if (!TYPES.includes(t as string)) fail("type", path, `unknown type ${JSON.stringify(t)}`);
    const ofType = (v: unknown) =>
      !types ||
      types.some((t) =>
        t === "integer"
          ? Number.isInteger(v)
          : t === "number"
            ? typeof v === "number"
            : t === "null"
              ? v === null
              : t === "array"
                ? Array.isArray(v)
                : t === "object"
                  ? isObj(v)
                  : typeof v === t,
      );
    const minLength = count(s, "minLength", path) ?? 0;
    const maxLength = count(s, "maxLength", path);
    const minItems = count(s, "minItems", path) ?? 0;
    const maxItems = count(s, "maxItems", path);
    const b = numberBounds(s, path);
    if ("const" in s || "enum" in s) {
      const k = "enum" in s ? "enum" : "const";
      const beside = validating.find((o) => o !== k && !BESIDE_ENUM.has(o));
      if (beside) fail(beside, path, `not supported alongside "${k}" (the ${k} values alone say what is valid)`);
      const values = "const" in s ? [s.const] : s.enum;
      if (!Array.isArray(values) || values.length === 0) fail("enum", path, "expected a non-empty array");
      const fits = (v: unknown) =>
        ofType(v) &&
        (typeof v !== "string" || ([...v].length >= minLength && [...v].length <= (maxLength ?? Infinity))) &&
        (typeof v !== "number" || !b || valueInBounds(b, v)) &&
        (!Array.isArray(v) || (v.length >= minItems && v.length <= (maxItems ?? Infinity)));
      const ok = (values as unknown[]).filter(fits);
      if (!ok.length) fail(k, path, `no value fits the type, length and bounds beside it`);
      return literals(ok);
    }
    if (types && types.length > 1) return union(types.map((t) => compile({ ...s, type: t }, path)));
    let t = types?.[0] as string | undefined;
    if (t === undefined) {
      // No type: generate the kind the keywords describe (any value of it is valid), else any value.
      if (["properties", "required", "additionalProperties"].some((k) => k in s)) t = "object";
      else if (["items", "minItems", "maxItems"].some((k) => k in s)) t = "array";
      else if (["minLength", "maxLength"].some((k) => k in s)) t = "string";
      else if (b) t = "number";
      else return any;
    }
    switch (t) {
      case "object": {
        const props: Prop[] = [];
        const declared = s.properties ?? {};
        if (!isObj(declared)) fail("properties", path, "expected an object");
        const required = s.required ?? [];
        if (!Array.isArray(required) || required.some((r) => typeof r !== "string"))
          fail("required", path, "expected an array of property names");
        const req = new Set(required as string[]);
        for (const [key, sub] of Object.entries(declared as Json))
          props.push({ key, node: compile(sub, `${path}/properties/${ptr(key)}`), required: req.has(key) });
        for (const key of req) if (!(key in (declared as Json))) props.push({ key, node: any, required: true });
        const extra = s.additionalProperties;
        if (extra !== undefined && typeof extra !== "boolean" && !isObj(extra))
          fail("additionalProperties", path, "expected a boolean or a schema");
        // With declared properties only those are generated (extra members are allowed, never required).
        const free = props.length || extra === false ? null : compile(extra ?? true, `${path}/additionalProperties`);
        return object(props, free);
      }
      case "array": {
        const items = s.items ?? true;
        if (Array.isArray(items)) fail("items", path, "tuple form (an array of schemas) is not supported");
        const min = minItems;
        const max = maxItems ?? Math.max(min, limits.maxItems);
        if (min > max) fail("minItems", path, `minItems ${min} > maxItems ${max}`);
        return { kind: "array", id: ids++, need: 0, items: compile(items, `${path}/items`), min, max };
      }
      case "string": {
        const min = minLength;
        const max = maxLength ?? Math.max(min, limits.maxStringLength);
        if (min > max) fail("minLength", path, `minLength ${min} > maxLength ${max}`);
        return str(min, max);
      }
      case "number":
      case "integer": {
        const integer = t === "integer";
        // Bounds no number of at most maxNumberLength characters meets would leave the automaton stuck.
        const room = limits.maxNumberLength - 1;
        if (b && ![..."-0123456789"].some((c) => canReach(b, c, room, integer)))
          fail(
            "minimum" in s || "exclusiveMinimum" in s ? "minimum" : "maximum",
            path,
            `no ${t} of at most ${limits.maxNumberLength} characters lies within the bounds`,
          );
        return { kind: "number", id: ids++, need: 0, integer, bounds: b };
      }
      case "boolean":
        return literals([true, false]);
      default:
        return literals([null]);
    }
  };
  const root = compile(schema, "#");
  computeNeeds(root);
  if (root.need > limits.maxDepth)
    fail(
      null,
      "#",
      root.need === Infinity
        ? "every value must nest without end (a $ref cycle through required properties or minItems)"
        : `values need ${root.need} nested objects/arrays, more than maxDepth ${limits.maxDepth}`,
    );
  return { root };
}

/** Fills in `need` for every node reachable from root (a fixpoint, since $refs can be cyclic). */
function computeNeeds(root: Node): void {
  const nodes: Node[] = [];
  const seen = new Set<Node>();
  const visit = (n: Node | null) => {
    if (!n || seen.has(n)) return;
    seen.add(n);
    nodes.push(n);
    if (n.kind === "object") {
      n.props.forEach((p) => visit(p.node));
      visit(n.free);
    } else if (n.kind === "array") visit(n.items);
    else if (n.kind === "union") n.options.forEach(visit);
    else if (n.kind === "ref") visit(n.target);
  };
  visit(root);
  for (const n of nodes)
    n.need = n.kind === "object" || n.kind === "array" || n.kind === "union" || n.kind === "ref" ? Infinity : 0;
  for (let changed = true; changed;) {
    changed = false;
    for (const n of nodes) {
      let v = n.need;
      if (n.kind === "object") v = 1 + Math.max(0, ...n.props.filter((p) => p.required).map((p) => p.node.need));
      else if (n.kind === "array") v = n.min > 0 ? 1 + n.items.need : 1;
      else if (n.kind === "union") v = Math.min(...n.options.map((o) => o.need));
      else if (n.kind === "ref") v = n.target ? n.target.need : Infinity;
      if (v < n.need) {
        n.need = v;
        changed = true;
      }
    }
  }
}

/** The concrete alternatives a node stands for (unions and refs flattened; cached on the node). */
export function leaves(node: Node): Leaf[] {
  const cached = (node as { leaves?: Leaf[] }).leaves;
  if (cached) return cached;
  const out: Leaf[] = [];
  const seen = new Set<Node>();
  const visit = (n: Node | null) => {
    if (!n || seen.has(n)) return; // a $ref cycle that consumes nothing adds no alternative
    seen.add(n);
    if (n.kind === "union") n.options.forEach(visit);
    else if (n.kind === "ref") visit(n.target);
    else out.push(n);
  };
  visit(node);
  (node as { leaves?: Leaf[] }).leaves = out;
  return out;
}
