// @webart/engine: the device layer, model, tokenizer, generation, LoRA GRPO and the ART-style API.
export * from "./gpu/index.ts";
