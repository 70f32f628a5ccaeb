// @webart/shaders: WGSL kernels for transformer inference and LoRA GRPO training, each with a CPU reference.
export * from "./util/random.ts";
export * from "./util/half.ts";
export * from "./util/check.ts";
