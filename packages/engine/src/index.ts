// @webart/engine: the device layer, model, tokenizer, generation, LoRA GRPO and the ART-style API.
/// <reference types="@webgpu/types" preserve="true" />
export * from "@webart/gpu";
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
export * from "./art/train-sft.ts";
export * from "./art/advantages.ts";
export * from "./art/tokenize.ts";
export * from "./engine.ts";
export * from "./art/backend.ts";
// ART's art.Model is ArtModel here (Model is the transformer); the webart package exports it as Model.
export {
  Model as ArtModel,
  TrainableModel,
  type ModelInit,
  type TrainableModelInit,
  type LogOptions,
} from "./art/model.ts";
export * from "./art/utils.ts";
export * from "./art/export.ts";
export * from "./art/local-backend.ts";
export * from "./art/checkpoints.ts";
export * from "./model/model.ts";
export * from "./model/bases.ts";
export * from "./model/lora.ts";
export * from "./model/kv.ts";
export * from "./model/runner.ts";
export * from "./model/weights.ts";
export * from "./model/init.ts";
export * from "./train/grpo.ts";
export * from "./train/head.ts";
export * from "./train/normalize.ts";
export * from "./train/sft.ts";
export * from "./memory.ts";
export * from "./speed.ts";
export * from "./art/remote-backend.ts";
export * from "./model/embedded.ts";
// Start-up kernel tuning results, kept between processes and visits (tune-cache.ts).
export {
  deviceKey,
  KERNELS_FINGERPRINT,
  loadTuneTable,
  tuneTable,
  type TuneEntry,
  type TuneTable,
} from "@webart/shaders";
export * from "./tune-cache.ts";
export * from "./model/peft.ts";
export * from "./model/merge.ts";
