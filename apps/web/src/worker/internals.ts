// Engine classes the worker uses, in one place.
export {
  Engine,
  LocalBackend,
  TrainableModel,
  RunFiles,
  stepDir,
  LoraState,
  validateLoraConfig,
  type LoraConfig,
  type ModelSpec,
  type TrainMetrics,
} from "webart/engine";
