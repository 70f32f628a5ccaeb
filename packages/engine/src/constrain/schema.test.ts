// Schema compilation: what the supported subset accepts, and errors that name the unsupported keyword and
// where it is (the handler turns them into 400s).
import { describe, expect, it } from "vitest";
import { compileSchema, DEFAULT_LIMITS, isFixedSchema, JsonSchemaError } from "./index.ts";
import { SCHEMAS } from "./testing.ts";

const compile = (s: Record<string, unknown>) => compileSchema(s, DEFAULT_LIMITS);

function error(s: Record<string, unknown>): JsonSchemaError {
  try {
    compile(s);
  } catch (e) {
    expect(e).toBeInstanceOf(JsonSchemaError);
    return e as JsonSchemaError;
  }
  throw new Error(`compiled: ${JSON.stringify(s)}`);
}

describe("compileSchema", () => {
  it("compiles every schema the tests drive, and json_object", () => {
    for (const s of Object.values(SCHEMAS)) expect(compile(s).root).toBeDefined();
    expect(compileSchema(null, DEFAULT_LIMITS).root.kind).toBe("object");
  });

  it("accepts what pydantic and zod emit: $defs, titles, nullable anyOf, single allOf, type lists", () => {
    const s = {
      $defs: { Pet: { title: "Pet", type: "object", properties: { name: { type: "string" } }, required: ["name"] } },
      definitions: { Kind: { enum: ["cat", "dog"] } },
      title: "Owner",
      type: "object",
      properties: {
        pet: { allOf: [{ $ref: "#/$defs/Pet" }], description: "the pet" },
        kind: { $ref: "#/definitions/Kind", title: "Kind" },
        nick: { anyOf: [{ type: "string" }, { type: "null" }], default: null },
        age: { type: ["integer", "null"], minimum: 0, maximum: 30 },
        legacy: { type: "string", nullable: true },
      },
      required: ["pet", "kind", "nick", "age"],
      additionalProperties: false,
    };
    const root = compile(s).root;
    expect(root.kind).toBe("object");
    if (root.kind === "object") expect(root.props.map((p) => p.key)).toEqual(["pet", "kind", "nick", "age", "legacy"]);
  });

  const cases: [string, Record<string, unknown>, string | null, string][] = [
    [
      "pattern",
      { type: "object", properties: { zip: { type: "string", pattern: "^[0-9]{5}$" } } },
      "pattern",
      "#/properties/zip",
    ],
    [
      "format",
      { type: "object", properties: { at: { type: "string", format: "date-time" } } },
      "format",
      "#/properties/at",
    ],
    ["an unknown keyword", { type: "object", properties: {}, requried: ["a"] }, "requried", "#"],
    [
      "enum beside properties",
      { type: "object", properties: { a: { type: "string" } }, enum: [{ a: "x" }] },
      "properties",
      "#",
    ],
    ["enum values all out of bounds", { type: "integer", enum: [1, 2], minimum: 3 }, "enum", "#"],
    ["bounds no number meets", { type: "integer", minimum: 3, maximum: 2 }, "minimum", "#"],
    ["bounds past the length limit", { type: "integer", minimum: 1e20 }, "minimum", "#"],
    ["a draft-4 exclusiveMinimum alone", { type: "number", exclusiveMinimum: true }, "exclusiveMinimum", "#"],
    ["a bound that is not a number", { type: "number", maximum: "9" }, "maximum", "#"],
    ["uniqueItems", { type: "array", items: { type: "integer" }, uniqueItems: true }, "uniqueItems", "#"],
    ["not", { not: { type: "string" } }, "not", "#"],
    [
      "multipleOf",
      { type: "object", properties: { n: { type: "integer", multipleOf: 5 } } },
      "multipleOf",
      "#/properties/n",
    ],
    ["allOf of two", { allOf: [{ type: "object" }, { required: ["a"] }] }, "allOf", "#"],
    ["prefixItems", { type: "array", prefixItems: [{ type: "string" }] }, "prefixItems", "#"],
    ["tuple items", { type: "array", items: [{ type: "string" }] }, "items", "#"],
    ["patternProperties", { type: "object", patternProperties: { "^x": {} } }, "patternProperties", "#"],
    ["minProperties", { type: "object", minProperties: 1 }, "minProperties", "#"],
    ["if", { if: { type: "string" }, then: { maxLength: 2 } }, "if", "#"],
    ["external $ref", { $ref: "https://example.com/s.json" }, "$ref", "#"],
    ["missing $ref", { type: "object", properties: { a: { $ref: "#/$defs/Nope" } } }, "$ref", "#/properties/a"],
    ["$ref with a sibling", { $defs: { A: { type: "string" } }, $ref: "#/$defs/A", maxLength: 3 }, "maxLength", "#"],
    ["anyOf with a sibling", { type: "object", anyOf: [{ required: ["a"] }] }, "type", "#"],
    ["unknown type", { type: "date" }, "type", "#"],
    ["minLength > maxLength", { type: "string", minLength: 5, maxLength: 2 }, "minLength", "#"],
    ["enum outside the type", { type: "integer", enum: ["a", "b"] }, "enum", "#"],
    [
      "keys with slashes in the path",
      { type: "object", properties: { "a/b": { pattern: "x" } } },
      "pattern",
      "#/properties/a~1b",
    ],
    ["false", { type: "object", properties: { a: false } }, null, "#/properties/a"],
    [
      "endless recursion",
      {
        $defs: { N: { type: "object", properties: { n: { $ref: "#/$defs/N" } }, required: ["n"] } },
        $ref: "#/$defs/N",
      },
      null,
      "#",
    ],
  ];
  for (const [name, schema, keyword, path] of cases)
    it(`rejects ${name}`, () => {
      const e = error(schema);
      expect(e.keyword).toBe(keyword);
      expect(e.path).toBe(path);
      if (keyword) expect(e.message).toContain(`"${keyword}"`);
      expect(e.message).toContain(path);
    });

  it("rejects schemas deeper than maxDepth", () => {
    let s: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 5; i++) s = { type: "array", items: s, minItems: 1 };
    expect(() => compileSchema(s, { ...DEFAULT_LIMITS, maxDepth: 4 })).toThrow(
      /5 nested objects\/arrays, more than maxDepth 4/,
    );
    expect(compileSchema(s, { ...DEFAULT_LIMITS, maxDepth: 5 }).root.need).toBe(5);
  });
});

describe("isFixedSchema", () => {
  it("is true only where one value fits", () => {
    const one = { type: "string", enum: ["B2"] };
    const obj = (props: object, extra: object = {}) => ({
      type: "object",
      properties: props,
      required: Object.keys(props),
      additionalProperties: false,
      ...extra,
    });
    for (const s of [
      one,
      { const: 3 },
      obj({ a: one, b: { const: null } }),
      obj({}),
      { type: "array", items: one, minItems: 2, maxItems: 2 },
    ])
      expect(isFixedSchema(s), JSON.stringify(s)).toBe(true);
    for (const s of [
      { type: "string", enum: ["A1", "B2"] },
      { type: "string" },
      obj({ a: one }, { required: [] }),
      obj({ a: one }, { additionalProperties: true }),
      obj({ a: { type: "string" } }),
      { type: "array", items: one, minItems: 1, maxItems: 2 },
      true,
      null,
    ])
      expect(isFixedSchema(s), JSON.stringify(s)).toBe(false);
  });
});
