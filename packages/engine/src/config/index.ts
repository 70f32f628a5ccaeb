// Model config: parse a Hugging Face config.json and derive the weight shapes it implies.
export {
  parseConfig,
  ConfigError,
  type ModelConfig,
  type Family,
  type RopeScaling,
  type TorchDtype,
} from "./config.ts";
export {
  tensorShapes,
  isIgnorableTensor,
  parameterCount,
  describeConfig,
  weightGroups,
  groupLayout,
  SEGMENT_ALIGN,
} from "./shapes.ts";
export { EMBED, FINAL_NORM, LM_HEAD, PROJECTIONS, NORMS, layerModule, layerTensor } from "./names.ts";
