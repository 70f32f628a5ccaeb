// webart/engine: the Engine (load a model, serve chat completions, train) and the layers under it: device, model, tokenizer, memory planner, checkpoints.
export * from "@webart/engine";
