// The contract between the OpenAI-compatible handler and the batching scheduler.

/** Restricts which tokens may come next (constrained decoding, e.g. JSON that fits a schema). */
export interface TokenConstraint {
  /** Bitmask over the vocabulary (bit i of word i>>5 set = token i allowed), or null for "anything". */
  allowed(): Uint32Array | null;
  /** Advances with the sampled token. */
  accept(tokenId: number): void;
  /** True when the constrained text is complete (the sequence should end). */
  done(): boolean;
  /** An independent copy of the state, when the constraint can make one (the canonical filter looks ahead). */
  fork?(): TokenConstraint;
  /**
   * Names the state, when the constraint can: two states with the same key allow the same tokens now and after
   * any tokens (the canonical filter remembers its look ahead by it). Unique across constraints of a process.
   */
  key?(): string;
}

export interface SamplingParams {
  /** 0 = greedy. */
  temperature: number;
  topP: number;
  /** 0 = no top-k filter. */
  topK: number;
  seed: number;
}

export interface GenerateRequest {
  promptIds: number[];
  /** Samples that share the prompt's KV cache. */
  n: number;
  maxTokens: number;
  sampling: SamplingParams;
  /** Token ids that end a sample (included in the sample's ids, as training needs them). */
  stopTokenIds: number[];
  /** How many alternatives to report per token (OpenAI top_logprobs), 0 for none. */
  topLogprobs: number;
  /** A constraint per sample (created fresh for each). */
  constraint?: () => TokenConstraint;
  signal?: AbortSignal;
}

export interface TokenEvent {
  sample: number;
  tokenId: number;
  /** The model's logprob of the token (softmax at temperature 1 over the whole vocabulary; a constraint's mask is
   *  ignored here, so it is the same logprob the trainer computes). */
  logprob: number;
  top?: { tokenId: number; logprob: number }[];
}

export type FinishReason = "stop" | "length" | "abort";

export interface SampleResult {
  tokenIds: number[];
  logprobs: number[];
  finishReason: FinishReason;
  /**
   * With a constraint: per token, the bitmask of the set it was drawn from (null where nothing was masked). Equal
   * sets are one object. The logprobs above are still the whole vocabulary's; training takes the softmax over the set.
   */
  allowed?: (Uint32Array | null)[];
}

export interface GenerateResult {
  samples: SampleResult[];
  promptTokens: number;
  /** Prompt tokens whose KV came from the cache (prefix reuse). */
  cachedPromptTokens: number;
}

/**
 * What the handler needs from the engine. `onToken` is called for each sampled token, in order per
 * sample; returning false ends that sample (a stop string matched), with finish reason "stop".
 */
export interface Generator {
  generate(req: GenerateRequest, onToken?: (e: TokenEvent) => boolean | void): Promise<GenerateResult>;
  readonly maxContext: number;
  readonly vocabSize: number;
}
