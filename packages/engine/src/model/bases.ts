// Base models shared on a device: engines (runs) that load the same base model on the same Gpu share one copy
// of its frozen weights, its open files and its parsed tokenizer; each keeps its own Model (LoRA), optimizer
// state and KV cache. The weights are freed and the files closed when the last engine using them lets go.
import type { Gpu } from "@webart/gpu";
import type { ModelConfig } from "../config/index.ts";
import { Tokenizer } from "../tokenizer/index.ts";
import {
  modelFiles,
  openModel,
  type LoadProgress,
  type ModelSource,
  type OpenModelOptions,
  type OpenedModel,
} from "../weights/index.ts";
import { freeWeights, uploadWeights, type GpuWeights } from "./weights.ts";

export interface BaseOptions extends OpenModelOptions {
  /** Keep 16-bit weights as f32 on the GPU (a separate copy from the 16-bit one). */
  weightsF32?: boolean;
  /** The model's matrices as q4 (a separate copy from the file's form). */
  quantize?: "q4";
}

interface Entry {
  gpu: Gpu;
  key: string;
  f32: boolean;
  quantize?: "q4";
  /** Engines holding it (and loads waiting for it). */
  users: number;
  opening: Promise<{ opened: OpenedModel; tokenizer: Tokenizer }>;
  /** The upload, started by the first engine that needs the weights. */
  weights?: Promise<GpuWeights>;
  /** Bytes of the uploaded weights' buffers (0 before the upload ends). */
  weightBytes: number;
}

/** One engine's hold on a shared base model: its files, tokenizer and (once uploaded) weights. */
export class BaseModel {
  private released = false;

  constructor(
    private readonly registry: BaseModels,
    private readonly entry: Entry,
    readonly opened: OpenedModel,
    readonly tokenizer: Tokenizer,
  ) {}

  get config(): ModelConfig {
    return this.opened.config;
  }

  /** Whether another engine has already uploaded (or is uploading) the weights: this one adds no weight bytes. */
  get weightsShared(): boolean {
    return this.entry.weights !== undefined;
  }

  /** The frozen weights on the GPU: uploaded by the first engine that asks, the same buffers for the others. */
  weights(onProgress?: (p: LoadProgress) => void): Promise<GpuWeights> {
    if (this.released) throw new Error("BaseModel.weights: this hold on the base model was released");
    const e = this.entry;
    if (!e.weights) {
      const p = uploadWeights(e.gpu, this.config, this.opened.tensors(onProgress), {
        toF32: e.f32,
        quantize: e.quantize,
      });
      // A failed upload keeps nothing on the GPU (uploadWeights) and the next engine may try again.
      p.then(
        (w) => (e.weightBytes = w.buffers.reduce((s, b) => s + b.size, 0)),
        () => e.weights === p && (e.weights = undefined),
      );
      e.weights = p;
    }
    return e.weights;
  }

  /** Lets go of the base model (once; later calls do nothing); the last holder frees the weights and closes the files. */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    await this.registry._release(this.entry);
  }
}

const objectIds = new WeakMap<object, number>();
let nextObjectId = 0;

/**
 * The base models loaded through it, by device and source. A source given as a string, URL, {path}, {url} or
 * {hub} is known by where it resolves to (a folder, a URL, a repo at a revision); picked files and directory
 * handles by identity.
 */
export class BaseModels {
  private entries = new Map<Gpu, Map<string, Entry>>();

  /** Opens the base model (or joins the engines already using it on this device). Release the result. */
  async acquire(gpu: Gpu, source: ModelSource, opts: BaseOptions = {}): Promise<BaseModel> {
    const { key, files } = await resolve(source, opts);
    let byKey = this.entries.get(gpu);
    if (!byKey) this.entries.set(gpu, (byKey = new Map()));
    let e = byKey.get(key);
    if (!e) {
      const entry: Entry = {
        gpu,
        key,
        f32: !!opts.weightsF32,
        quantize: opts.quantize,
        users: 0,
        opening: open(files, opts),
        weightBytes: 0,
      };
      entry.opening.catch(() => this.forget(entry));
      byKey.set(key, (e = entry));
    }
    e.users++;
    try {
      const { opened, tokenizer } = await e.opening;
      return new BaseModel(this, e, opened, tokenizer);
    } catch (err) {
      e.users--;
      throw err;
    }
  }

  /** The base models loaded now: where from, how many engines use each, bytes of its weights on the GPU (0 before the upload). */
  loaded(): { name: string; users: number; weightBytes: number }[] {
    return [...this.entries.values()].flatMap((byKey) =>
      [...byKey.values()].map((e) => ({ name: e.key, users: e.users, weightBytes: e.weightBytes })),
    );
  }

  /** @internal BaseModel.release */
  async _release(e: Entry): Promise<void> {
    if (--e.users > 0) return;
    this.forget(e);
    // The last holder: an upload it started has ended (it awaited it), so this is the final state.
    const w = await e.weights?.catch(() => undefined);
    if (w) freeWeights(e.gpu, w);
    const { opened } = await e.opening;
    await opened.close();
  }

  private forget(e: Entry): void {
    const byKey = this.entries.get(e.gpu);
    if (byKey?.get(e.key) !== e) return;
    byKey.delete(e.key);
    if (!byKey.size) this.entries.delete(e.gpu);
  }
}

async function resolve(source: ModelSource, opts: BaseOptions): Promise<{ key: string; files: ModelSource }> {
  const dtype = (opts.weightsF32 ? " (f32)" : "") + (opts.quantize ? ` (${opts.quantize})` : "");
  const named =
    typeof source === "string" ||
    source instanceof URL ||
    (!("open" in source) && ("path" in source || "url" in source || "hub" in source));
  if (named) {
    const files = await modelFiles(source, opts);
    return { key: files.name + dtype, files };
  }
  let id = objectIds.get(source);
  if (id === undefined) objectIds.set(source, (id = ++nextObjectId));
  return { key: `#${id}${dtype}`, files: source };
}

/** Opens the files and builds the tokenizer, so a broken tokenizer is refused before anything goes to the GPU. */
async function open(
  source: ModelSource,
  opts: OpenModelOptions,
): Promise<{ opened: OpenedModel; tokenizer: Tokenizer }> {
  const opened = await openModel(source, opts);
  try {
    const tokenizer = Tokenizer.fromJSON(opened.tokenizerJson, opened.tokenizerConfig, {
      chatTemplate: opened.chatTemplate ?? undefined,
    });
    return { opened, tokenizer };
  } catch (e) {
    await opened.close();
    const msg = (e as Error).message.replace(/^tokenizer\.json: /, "");
    throw new Error(
      `${opened.files.name}/tokenizer.json (with tokenizer_config.json): the tokenizer could not be built: ${msg}`,
      { cause: e },
    );
  }
}
