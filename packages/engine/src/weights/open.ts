// openModel: from wherever a model lives (Node path, URL, picked files, directory handle, hub repo id) to its
// parsed config, tokenizer files and a weight reader checked against the config.

import { isIgnorableTensor, parseConfig, tensorShapes, type ModelConfig } from "../config/index.ts";
import {
  blobFiles,
  directoryHandleFiles,
  nodeDirFiles,
  readJson,
  readText,
  urlFiles,
  type DirectoryHandleLike,
  type ModelFiles,
} from "./files.ts";
import { hubFiles, isRepoId, type HubOptions } from "./hub.ts";
import { WeightReader, type StreamOptions, type Tensor } from "./reader.ts";
import { nodeFs, type UrlSourceOptions } from "./source.ts";
import { embeddedModelFiles, isEmbeddedModel } from "../model/embedded.ts";

/**
 * Where a model is. "webart-tiny" (EMBEDDED_MODEL) and "webart-tools" are the models shipped inside the package. A string is a URL when it starts with http(s)://, else (in Node) a folder when one exists
 * at that path, else a hub repo id ("org/name[@rev]"); in the browser a non-repo string is a URL relative to
 * the page. The object forms say which explicitly.
 */
export type ModelSource =
  | string
  | URL
  | { path: string }
  | { url: string }
  | { hub: string }
  | Iterable<File>
  | ArrayLike<File>
  | Map<string, Blob>
  | DirectoryHandleLike
  | ModelFiles;

export interface OpenModelOptions extends HubOptions {
  /** Range-less servers: see UrlSourceOptions.noRange. */
  noRange?: UrlSourceOptions["noRange"];
}

export interface OpenedModel {
  files: ModelFiles;
  config: ModelConfig;
  /** config.json as parsed JSON. */
  configJson: Record<string, unknown>;
  tokenizerJson: Record<string, unknown>;
  /** tokenizer_config.json ({} when absent). */
  tokenizerConfig: Record<string, unknown>;
  /** chat_template.jinja, which newer exports keep outside tokenizer_config.json; null when absent. */
  chatTemplate: string | null;
  /** generation_config.json (extra eos ids, sampling defaults); null when absent. */
  generationConfig: Record<string, unknown> | null;
  /** The checkpoint, already checked against the config's names and shapes. */
  weights: WeightReader;
  /** Streams the weights the config expects, one tensor at a time. */
  tensors(onProgress?: StreamOptions["onProgress"]): AsyncGenerator<Tensor>;
  close(): Promise<void>;
}

const isNode = () => !!(globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node;

/** Resolves a ModelSource to a ModelFiles without reading anything but (in Node) a stat of a path. */
export async function modelFiles(source: ModelSource, opts: OpenModelOptions = {}): Promise<ModelFiles> {
  const urlOpts: UrlSourceOptions = { fetch: opts.fetch, noRange: opts.noRange };
  if (source instanceof URL) return urlFiles(source.href, urlOpts);
  if (typeof source === "string") {
    if (isEmbeddedModel(source)) return embeddedModelFiles(source);
    if (/^https?:\/\//i.test(source)) return urlFiles(source, urlOpts);
    if (isNode()) {
      const isDir = await (await nodeFs()).stat(source).then(
        (s) => s.isDirectory(),
        () => false,
      );
      if (isDir) return nodeDirFiles(source);
      if (isRepoId(source)) return hubFiles(source, opts);
      throw new Error(
        `model source "${source}" is neither a folder nor a Hugging Face repo id ("org/name[@revision]")`,
      );
    }
    return isRepoId(source) ? hubFiles(source, opts) : urlFiles(source, urlOpts);
  }
  if ("open" in source && typeof source.open === "function" && "name" in source) return source as ModelFiles;
  if ("path" in source && typeof source.path === "string") return nodeDirFiles(source.path);
  if ("url" in source && typeof source.url === "string") return urlFiles(source.url, urlOpts);
  if ("hub" in source && typeof source.hub === "string") return hubFiles(source.hub, opts);
  if ("getFileHandle" in source) return directoryHandleFiles(source);
  return blobFiles(source as Iterable<File> | Map<string, Blob>);
}

/**
 * Opens a model: reads config.json (parsed and validated), the tokenizer files, and the safetensors headers,
 * and checks every tensor name and shape against the config. No tensor data is read until `tensors()`.
 */
export async function openModel(source: ModelSource, opts: OpenModelOptions = {}): Promise<OpenedModel> {
  const files = await modelFiles(source, opts);
  const configJson = await readJson(files, "config.json");
  if (!configJson) throw new Error(`${files.name}: no config.json (is this a Hugging Face model folder?)`);
  const config = parseConfig(configJson, `${files.name}/config.json`);
  const tokenizerJson = await readJson(files, "tokenizer.json");
  if (!tokenizerJson) throw new Error(`${files.name}: no tokenizer.json (a fast-tokenizer file is needed)`);
  const tokenizerConfig = (await readJson(files, "tokenizer_config.json")) ?? {};
  const chatTemplate = await readText(files, "chat_template.jinja");
  const generationConfig = await readJson(files, "generation_config.json");

  const weights = await WeightReader.open(files);
  const shapes = tensorShapes(config);
  const ignore = (name: string) => isIgnorableTensor(config, name);
  try {
    weights.check(shapes, ignore);
  } catch (e) {
    await weights.close();
    throw e;
  }
  return {
    files,
    config,
    configJson,
    tokenizerJson,
    tokenizerConfig,
    chatTemplate,
    generationConfig,
    weights,
    tensors: (onProgress) => weights.tensors(shapes, { ignore, onProgress }),
    close: () => weights.close(),
  };
}
