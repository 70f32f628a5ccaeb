// @webart/shaders: WGSL kernels for transformer inference and LoRA GRPO training, each with a CPU reference.
/// <reference types="@webgpu/types" preserve="true" />
export * from "./add/index.ts";
export * from "./matmul/index.ts";
export * from "./matvec/index.ts";
export * from "./embedding/index.ts";
export * from "./rmsnorm/index.ts";
export * from "./rope/index.ts";
export * from "./kvcache/index.ts";
export * from "./attention/index.ts";
export * from "./swiglu/index.ts";
export * from "./lora/index.ts";
export * from "./logprobs/index.ts";
export * from "./sample/index.ts";
export * from "./adamw/index.ts";
export * from "./grpo/index.ts";
export * from "./tune/index.ts";
export * from "./tune/kernels.ts";
export * from "./util/row-threads.ts";
export * from "./quant/index.ts";
export * from "./probe/index.ts";
