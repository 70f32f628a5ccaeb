// Constrained decoding: JSON (json_object and json_schema response formats) as a token-level constraint.
export { createJsonConstraintFactory, JsonConstraint, JsonGrammar, type JsonConstraintOptions } from "./json.ts";
export { compileSchema, DEFAULT_LIMITS, JsonSchemaError, type JsonLimits } from "./schema.ts";
export { tokenBytes, vocabFor, type Vocab, type VocabTokenizer } from "./vocab.ts";
export { choiceConstraint } from "./choice.ts";
export { isFixedSchema, toolCallConstraint, toolCallSchema, type ToolSpecLike } from "./tool.ts";
export { canonicalConstraint, CanonicalPairs, type PairTokenizer } from "./canonical.ts";
