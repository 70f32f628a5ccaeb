// Where base models come from, in the worker: the embedded model (served beside the app), a URL, a Hugging Face
// repo, or files picked on this machine. URL models and picked files are kept in the Cache API ("webart-models")
// and served to the engine by ranges from there, so the next visit loads them without the network or the picker;
// hub files go through the engine's own hub cache.
import {
  DEFAULT_TRAIN_CONFIG,
  EMBEDDED_MODEL,
  EMBEDDED_TOOLS_MODEL,
  defaultMemoryBudget,
  defaultMergeLora,
  getDevice,
  modelFiles,
  parseConfig,
  PlanError,
  planDroppingMerge,
  planTraining,
  readJson,
  readText,
  Tokenizer,
  validateLoraConfig,
  type MemoryPlan,
  type ModelConfig,
  type PlanSetup,
} from "webart/engine";
import type { EngineEvent, EnvName, ModelChoice, ModelInfo, TrainSettings } from "../api.ts";

const CACHE = "webart-models";
/** Picked files live under this origin in the cache; `.invalid` never resolves, so nothing leaks to a network. */
export const LOCAL_ORIGIN = "https://local.webart.invalid/";
const MISSING = "x-webart-missing";
/** Files of a Hugging Face model folder the engine may read; others in a picked folder are not copied. */
const MODEL_FILE =
  /(^|\/)(config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|chat_template\.jinja|special_tokens_map\.json|model\.safetensors\.index\.json|[^/]+\.safetensors)$/;

let emit: (e: EngineEvent) => void = () => {};
export const setModelEvents = (f: (e: EngineEvent) => void) => void (emit = f);

/** The string a run records as its base model (and the engine loads). */
export function baseModelOf(m: ModelChoice): string {
  switch (m.kind) {
    case "embedded":
      // A model inside the webart package: loaded from memory, no files served.
      return m.name ?? EMBEDDED_MODEL;
    case "url":
      return m.url.trim().replace(/\/+$/, "");
    case "hub":
      return m.repo.trim();
    case "local":
      return `${LOCAL_ORIGIN}${m.id}`;
  }
}

export function labelOf(m: ModelChoice): string {
  return m.kind === "embedded" ? `${baseModelOf(m)} (embedded)` : m.kind === "local" ? m.label : baseModelOf(m);
}

/** The choice a recorded base-model string came from. */
export function choiceOf(baseModel: string, label?: string): ModelChoice {
  // Runs made before the model shipped inside the package recorded the path it was served at.
  if (baseModel === EMBEDDED_MODEL || /(^|\/)models\/webart-tiny$/.test(baseModel)) return { kind: "embedded" };
  if (baseModel === EMBEDDED_TOOLS_MODEL) return { kind: "embedded", name: EMBEDDED_TOOLS_MODEL };
  if (baseModel.startsWith(LOCAL_ORIGIN))
    return { kind: "local", id: baseModel.slice(LOCAL_ORIGIN.length), label: label ?? baseModel };
  if (/^https?:\/\//i.test(baseModel)) return { kind: "url", url: baseModel };
  return { kind: "hub", repo: baseModel };
}

function rangeResponse(blob: Blob, range: string | null): Response {
  if (!range) return new Response(blob, { status: 200, headers: { "content-length": String(blob.size) } });
  const m = /^bytes=(\d+)-(\d*)$/.exec(range.trim());
  if (!m) return new Response(null, { status: 416, headers: { "content-range": `bytes */${blob.size}` } });
  const start = Number(m[1]);
  const end = Math.min(m[2] ? Number(m[2]) : blob.size - 1, blob.size - 1);
  if (start >= blob.size || end < start)
    return new Response(null, { status: 416, headers: { "content-range": `bytes */${blob.size}` } });
  return new Response(blob.slice(start, end + 1), {
    status: 206,
    headers: { "content-range": `bytes ${start}-${end}/${blob.size}`, "content-length": String(end - start + 1) },
  });
}

const notFound = () => new Response(null, { status: 404, statusText: "Not Found" });

async function download(url: string, res: Response, cache: Cache): Promise<Blob> {
  const total = Number(res.headers.get("content-length")) || 0;
  const file = url.split("/").pop() ?? url;
  let done = 0;
  const counted = res.body!.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, ctl) {
        done += chunk.byteLength;
        emit({ type: "load", stage: "download", file, bytesDone: done, bytesTotal: Math.max(total, done) });
        ctl.enqueue(chunk);
      },
    }),
  );
  // Stored whole before use, so an interrupted download is never served on a later visit.
  await cache.put(url, new Response(counted, { headers: { "content-type": "application/octet-stream" } }));
  const stored = await cache.match(url);
  if (!stored) throw new Error(`${url}: downloaded but the browser did not keep it (storage full?)`);
  return stored.blob();
}

/**
 * The engine's fetch: picked files from the cache; URL models downloaded once into the cache and read by
 * ranges from it; everything else (the embedded model on this origin, the hub, which caches itself) as is.
 */
export async function modelFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  const range = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined)).get("range");
  const local = url.startsWith(LOCAL_ORIGIN);
  const sameOrigin = url.startsWith(self.location.origin + "/");
  const hub = /^https:\/\/huggingface\.co\/.+\/resolve\//.test(url);
  if (!local && (sameOrigin || hub)) {
    const res = await fetch(input, init);
    // Static hosts that answer every unknown path with the app's index.html: that is a missing file here.
    if (sameOrigin && res.ok && (res.headers.get("content-type") ?? "").includes("text/html")) {
      await res.body?.cancel();
      return notFound();
    }
    return res;
  }
  const cache = await caches.open(CACHE);
  const hit = await cache.match(url);
  if (hit) return hit.headers.get(MISSING) ? notFound() : rangeResponse(await hit.blob(), range);
  if (local) return notFound();
  const headers = new Headers(init?.headers);
  headers.delete("range"); // the whole file, once, into the cache
  const res = await fetch(url, { headers }).catch((e: Error) => {
    throw new Error(
      `${url}: request failed (${e.message}); check the URL, that the server allows CORS, and that you are online`,
    );
  });
  if (res.status === 404 || res.status === 410) {
    await res.body?.cancel();
    await cache.put(url, new Response("", { headers: { [MISSING]: "1" } }));
    return notFound();
  }
  if (!res.ok || !res.body) return res;
  return rangeResponse(await download(url, res, cache), range);
}

interface DirHandle {
  name: string;
  entries(): AsyncIterable<[string, { kind: "file" | "directory"; getFile?(): Promise<File> }]>;
}

async function walk(dir: DirHandle, prefix: string, out: Map<string, File>): Promise<void> {
  for await (const [name, h] of dir.entries()) {
    const path = prefix + name;
    if (h.kind === "directory") await walk(h as unknown as DirHandle, path + "/", out);
    else if (MODEL_FILE.test(path)) out.set(path, await h.getFile!());
  }
}

/** Copies picked files (an input's files, paths from webkitRelativePath) or a folder handle into the cache. */
export async function addLocalModel(picked: File[] | FileSystemDirectoryHandle, label: string): Promise<ModelChoice> {
  const files = new Map<string, File>();
  if (Array.isArray(picked)) {
    for (const f of picked) {
      const rel = f.webkitRelativePath ? f.webkitRelativePath.split("/").slice(1).join("/") : f.name;
      if (MODEL_FILE.test(rel)) files.set(rel, f);
    }
  } else await walk(picked as unknown as DirHandle, "", files);
  if (!files.has("config.json")) {
    throw new Error(
      `${label}: no config.json among the picked files; pick a Hugging Face model folder (config.json, tokenizer.json, *.safetensors)`,
    );
  }
  const id = `${label.replace(/[^A-Za-z0-9._-]+/g, "-").slice(0, 40) || "model"}-${Date.now().toString(36)}`;
  const cache = await caches.open(CACHE);
  const total = [...files.values()].reduce((s, f) => s + f.size, 0);
  let done = 0;
  for (const [path, f] of files) {
    await cache.put(`${LOCAL_ORIGIN}${id}/${path}`, new Response(f));
    done += f.size;
    emit({ type: "load", stage: "copy", file: path, bytesDone: done, bytesTotal: total });
  }
  return { kind: "local", id, label };
}

export async function clearModelCache(): Promise<void> {
  await caches.delete(CACHE);
  await caches.delete("webart-hub");
}

/** Sequences held at once: every rollout of a step runs concurrently, within limits. */
export const kvSlotsFor = (s: TrainSettings) => Math.min(32, Math.max(4, s.groupSize * s.groupsPerStep));
/** The context a run's engine gets: 1024 tokens for moves and chats, 2048 for the email agent (its tool definitions,
 *  search results and emails fill a conversation), never past the model's own. */
export const maxContextFor = (c: ModelConfig, env?: EnvName) =>
  Math.min(c.maxPositionEmbeddings, env === "email" ? 2048 : 1024);
/** The run's LoRA: rank from the settings, alpha twice the rank, the default targets. */
export const loraFor = (s: TrainSettings) => validateLoraConfig({ rank: s.loraRank, alpha: 2 * s.loraRank });

/** The engine's sizes and budget for a run: engineOptions loads with them and inspectModel plans with them. */
function engineSizes(s: TrainSettings, c: ModelConfig) {
  return {
    kvSlots: kvSlotsFor(s),
    maxContext: maxContextFor(c, s.env),
    prefillChunk: 256,
    quantize: s.quantize,
    memoryBudget:
      s.memoryBudgetGiB !== undefined
        ? Math.floor(s.memoryBudgetGiB * 2 ** 30)
        : defaultMemoryBudget({ browser: true, cpuDevice: false }),
  };
}

/** How the engine reaches model files: through modelFetch, with download progress as events. */
function sourceOptions() {
  return {
    fetch: modelFetch as typeof fetch,
    onDownload: (p: { file: string; bytesDone: number; bytesTotal: number | null }) =>
      emit({
        type: "load",
        stage: "download",
        file: p.file,
        bytesDone: p.bytesDone,
        bytesTotal: p.bytesTotal ?? p.bytesDone,
      }),
  };
}

/** Options for loading a run's engine (KV cache sized for its concurrent games, the memory budget: LocalBackend
 *  adds the training plan, and a load over the budget is refused before anything is allocated) with progress. */
export function engineOptions(settings: TrainSettings, config: ModelConfig) {
  return {
    ...sourceOptions(),
    ...engineSizes(settings, config),
    onProgress: (p: { bytesDone: number; bytesTotal: number; tensor: string }) =>
      emit({ type: "load", stage: "weights", file: p.tensor, bytesDone: p.bytesDone, bytesTotal: p.bytesTotal }),
  };
}

export async function readModelConfig(baseModel: string): Promise<ModelConfig> {
  const files = await modelFiles(baseModel, sourceOptions());
  const json = await readJson(files, "config.json");
  if (!json) throw new Error(`${files.name}: no config.json (is this a Hugging Face model folder?)`);
  return parseConfig(json, `${files.name}/config.json`);
}

/** A base model's tokenizer with its chat template, read from its files (no weights, no GPU). */
export async function readTokenizer(baseModel: string): Promise<Tokenizer> {
  const files = await modelFiles(baseModel, sourceOptions());
  const json = await readJson(files, "tokenizer.json");
  if (!json) throw new Error(`${files.name}: no tokenizer.json (a fast-tokenizer file is needed)`);
  const config = (await readJson(files, "tokenizer_config.json")) ?? {};
  const chatTemplate = (await readText(files, "chat_template.jinja")) ?? undefined;
  return Tokenizer.fromJSON(json, config, { chatTemplate });
}

/**
 * The model's config and the memory plan of training it with these settings, made as the run's engine will make
 * it when LocalBackend loads it (engineSizes, the run's LoRA, a context-long sequence, the default micro-batch),
 * checked against the device's limits and the budget.
 */
export async function inspectModel(m: ModelChoice, s: TrainSettings): Promise<ModelInfo> {
  const baseModel = baseModelOf(m);
  const c = await readModelConfig(baseModel);
  const e = engineSizes(s, c);
  const lora = loraFor(s);
  const gpu = await getDevice();
  const weightBytes = c.torchDtype === "float32" || !c.torchDtype ? 4 : 2;
  const setup: Omit<PlanSetup, "train" | "vocabChunk"> = {
    weightBytes,
    ...(e.quantize ? { quantize: e.quantize } : {}),
    kvSlots: e.kvSlots,
    kvContext: e.maxContext,
    prefillChunk: e.prefillChunk,
    lora: { rank: lora.rank, targets: lora.targets },
    mergeLora: !e.quantize && defaultMergeLora(gpu, weightBytes),
  };
  const limits = { maxStorageBufferBindingSize: gpu.maxStorageBinding, maxBufferSize: gpu.maxBufferSize };
  let plan: MemoryPlan | undefined;
  let reason: string | undefined;
  const make = () =>
    planTraining(c, setup, limits, e.memoryBudget, {
      microBatchTokens: DEFAULT_TRAIN_CONFIG.microBatchTokens,
      longest: e.maxContext,
    }).plan;
  try {
    // As the engine does: the merged copy of the weights (Model.mergeLora) is dropped where the plan needs it to fit.
    plan = planDroppingMerge(setup, make);
  } catch (err) {
    if (!(err instanceof PlanError)) throw err;
    // The engine's advice names the CLI flag; here the budget is a setting.
    reason = err.message.replace("--memory-budget", "GPU memory budget (Training settings)");
  }
  return {
    baseModel,
    label: labelOf(m),
    architecture: c.architecture,
    layers: c.numLayers,
    hidden: c.hiddenSize,
    vocab: c.vocabSize,
    dtype: c.torchDtype ?? "float32",
    plan: plan?.lines ?? [],
    totalBytes: plan?.total ?? null,
    budgetBytes: e.memoryBudget,
    fits: plan !== undefined,
    reason,
  };
}
