// Model loading: byte sources, model directories (Node, URL, browser files, hub with cache), safetensors and
// the streaming weight reader.
export {
  type ByteSource,
  type UrlSourceOptions,
  NotFoundError,
  SourceError,
  memorySource,
  blobSource,
  fileSource,
  urlSource,
} from "./source.ts";
export {
  type Dtype,
  type TensorInfo,
  type TensorData,
  type SafetensorsHeader,
  DTYPE_BYTES,
  MAX_HEADER_BYTES,
  WeightsError,
  readSafetensorsHeader,
  parseSafetensorsHeader,
  writeSafetensors,
  safetensorsPrefix,
  tensorToF32,
} from "./safetensors.ts";
export { type Tensor, type LoadProgress, type StreamOptions, WeightReader, INDEX_FILE, SINGLE_FILE } from "./reader.ts";
export {
  type ModelFiles,
  type DirectoryHandleLike,
  readJson,
  readText,
  nodeDirFiles,
  urlFiles,
  blobFiles,
  directoryHandleFiles,
} from "./files.ts";
export {
  type HubOptions,
  type HubCache,
  type HubFileKey,
  type CacheStorageLike,
  HUB_ENDPOINT,
  isRepoId,
  parseRepoId,
  hubFileUrl,
  hubFiles,
  defaultHubCache,
  nodeHubCache,
  browserHubCache,
} from "./hub.ts";
export { type ModelSource, type OpenModelOptions, type OpenedModel, modelFiles, openModel } from "./open.ts";
