// @webart/engine: the device layer, model, tokenizer, generation, LoRA GRPO and the ART-style API.
export * from "./gpu/index.ts";
export * from "./config/index.ts";
export * from "./weights/index.ts";
export * from "./tokenizer/index.ts";
export * from "./plan.ts";
export * from "./store/index.ts";
export * from "./openai/index.ts";
export * from "./generate/types.ts";
export * from "./generate/scheduler.ts";
export * from "./art/trajectories.ts";
export * from "./art/gather.ts";
export * from "./art/train-config.ts";
export * from "./art/advantages.ts";
export * from "./art/tokenize.ts";
