// CPU fp32 references of every kernel, for tests and benchmarks that check the GPU against them.
export * from "./adamw/reference.ts";
export * from "./add/reference.ts";
export * from "./attention/reference.ts";
export * from "./embedding/reference.ts";
export * from "./grpo/reference.ts";
export * from "./kvcache/reference.ts";
export * from "./logprobs/reference.ts";
export * from "./lora/reference.ts";
export * from "./matmul/reference.ts";
export * from "./matvec/reference.ts";
export * from "./rmsnorm/reference.ts";
export * from "./rope/reference.ts";
export * from "./sample/reference.ts";
export * from "./swiglu/reference.ts";
export * from "./quant/reference.ts";
