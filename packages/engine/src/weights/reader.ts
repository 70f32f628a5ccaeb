// Weight reader over a single .safetensors file or a sharded checkpoint (model.safetensors.index.json):
// checks names and shapes against what the config expects, then streams tensors one at a time by ranged reads,
// so the engine can upload each to the GPU and drop it (the model is never held twice in JS memory).

import { readJson, type ModelFiles } from "./files.ts";
import { readSafetensorsHeader, WeightsError, type Dtype, type TensorInfo } from "./safetensors.ts";
import type { ByteSource } from "./source.ts";

export interface Tensor {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** Raw little-endian data in its own buffer (byteOffset 0), so any typed-array view of it is aligned. */
  bytes: Uint8Array<ArrayBuffer>;
}

export interface LoadProgress {
  bytesDone: number;
  bytesTotal: number;
  /** The tensor just read. */
  tensor: string;
}

export interface StreamOptions {
  onProgress?: (p: LoadProgress) => void;
  /** Names the checkpoint may hold that are skipped rather than reported as unexpected. */
  ignore?: (name: string) => boolean;
}

export const INDEX_FILE = "model.safetensors.index.json";
export const SINGLE_FILE = "model.safetensors";
// Tensors under SMALL are fetched together in spans of up to SPAN bytes: norms and biases would otherwise cost
// one request (or syscall) each. Bigger tensors are read on their own.
const SMALL = 1 << 20;
const SPAN = 8 << 20;

export class WeightReader {
  /** Every tensor in the checkpoint, in file order (shard by shard). */
  readonly tensorsInfo: ReadonlyMap<string, TensorInfo>;
  /** Sum of all tensors' bytes. */
  readonly bytesTotal: number;

  private constructor(
    /** Name used in whole-checkpoint errors: the index file, or the single file. */
    readonly name: string,
    private readonly sources: Map<string, ByteSource>,
    infos: TensorInfo[],
    /** __metadata__ of the single file, or the index's metadata. */
    readonly metadata: Record<string, unknown>,
  ) {
    this.tensorsInfo = new Map(infos.map((t) => [t.name, t]));
    this.bytesTotal = infos.reduce((a, t) => a + t.byteLength, 0);
  }

  /** One .safetensors file (a model, a LoRA adapter, an optimizer state). */
  static async fromSource(src: ByteSource, file = src.name): Promise<WeightReader> {
    const h = await readSafetensorsHeader(src, file);
    return new WeightReader(file, new Map([[file, src]]), h.tensors, h.metadata);
  }

  /** The checkpoint in a model directory: sharded when an index exists, model.safetensors otherwise. */
  static async open(files: ModelFiles): Promise<WeightReader> {
    const index = await readJson(files, INDEX_FILE);
    if (!index) {
      const src = await files.open(SINGLE_FILE);
      if (!src)
        throw new WeightsError(
          files.name,
          null,
          `has neither ${SINGLE_FILE} nor ${INDEX_FILE} (only safetensors checkpoints are supported, not pytorch_model.bin)`,
        );
      return WeightReader.fromSource(src, SINGLE_FILE);
    }
    return WeightReader.sharded(files, index);
  }

  private static async sharded(files: ModelFiles, index: Record<string, unknown>): Promise<WeightReader> {
    const map = index.weight_map;
    if (typeof map !== "object" || map === null || Array.isArray(map))
      throw new WeightsError(INDEX_FILE, null, "has no weight_map object");
    const weightMap = map as Record<string, unknown>;
    const shards = [...new Set(Object.values(weightMap))];
    const sources = new Map<string, ByteSource>();
    const infos: TensorInfo[] = [];
    try {
      for (const shard of shards) {
        if (typeof shard !== "string" || shard.includes(".."))
          throw new WeightsError(INDEX_FILE, null, `weight_map names an invalid shard ${JSON.stringify(shard)}`);
        const src = await files.open(shard);
        if (!src)
          throw new WeightsError(INDEX_FILE, null, `weight_map names shard ${shard}, which is not in ${files.name}`);
        sources.set(shard, src);
        for (const t of (await readSafetensorsHeader(src, shard)).tensors) {
          if (weightMap[t.name] !== shard)
            throw new WeightsError(
              shard,
              t.name,
              weightMap[t.name] === undefined
                ? `is not listed in ${INDEX_FILE}`
                : `is listed in ${INDEX_FILE} under ${weightMap[t.name]}`,
            );
          infos.push(t);
        }
      }
      const found = new Set(infos.map((t) => t.name));
      for (const [name, shard] of Object.entries(weightMap))
        if (!found.has(name))
          throw new WeightsError(String(shard), name, `is listed in ${INDEX_FILE} but missing from the shard`);
    } catch (e) {
      await Promise.all([...sources.values()].map((s) => s.close?.()));
      throw e;
    }
    const metadata =
      typeof index.metadata === "object" && index.metadata !== null ? (index.metadata as Record<string, unknown>) : {};
    return new WeightReader(INDEX_FILE, sources, infos, metadata);
  }

  /**
   * Checks the checkpoint against the expected name → shape map: every expected tensor present with that
   * shape, nothing else (except `ignore`d names). Throws a WeightsError naming the file and tensor.
   */
  check(expected: ReadonlyMap<string, readonly number[]>, ignore: (name: string) => boolean = () => false): void {
    for (const [name, shape] of expected) {
      const t = this.tensorsInfo.get(name);
      if (!t) throw new WeightsError(this.name, name, `is missing (expected shape [${shape.join(", ")}])`);
      if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
        throw new WeightsError(
          t.file,
          name,
          `has shape [${t.shape.join(", ")}], but the config implies [${shape.join(", ")}]`,
        );
    }
    for (const t of this.tensorsInfo.values())
      if (!expected.has(t.name) && !ignore(t.name))
        throw new WeightsError(
          t.file,
          t.name,
          `is not expected by the config (shape [${t.shape.join(", ")}]; wrong model type or config?)`,
        );
  }

  /** Reads one tensor. */
  async read(name: string): Promise<Tensor> {
    const t = this.tensorsInfo.get(name);
    if (!t) throw new WeightsError(this.name, name, "is not in the checkpoint");
    return {
      name,
      dtype: t.dtype,
      shape: t.shape.slice(),
      bytes: await this.sources.get(t.file)!.read(t.offset, t.byteLength),
    };
  }

  /**
   * Yields tensors one at a time in file order. With `expected`, the whole checkpoint is checked first (so a
   * bad file fails before anything is read or uploaded) and only expected tensors are read.
   */
  async *tensors(expected?: ReadonlyMap<string, readonly number[]>, opts: StreamOptions = {}): AsyncGenerator<Tensor> {
    if (expected) this.check(expected, opts.ignore);
    const wanted = [...this.tensorsInfo.values()].filter((t) => (expected ? expected.has(t.name) : true));
    const bytesTotal = wanted.reduce((a, t) => a + t.byteLength, 0);
    let bytesDone = 0;
    for (let i = 0; i < wanted.length;) {
      // A span: consecutive small tensors, adjacent in the same file.
      let j = i + 1;
      if (wanted[i].byteLength < SMALL)
        while (
          j < wanted.length &&
          wanted[j].file === wanted[i].file &&
          wanted[j].byteLength < SMALL &&
          wanted[j].offset === wanted[j - 1].offset + wanted[j - 1].byteLength &&
          wanted[j].offset + wanted[j].byteLength - wanted[i].offset <= SPAN
        )
          j++;
      const first = wanted[i];
      const last = wanted[j - 1];
      const span = await this.sources.get(first.file)!.read(first.offset, last.offset + last.byteLength - first.offset);
      const alone = j === i + 1;
      for (; i < j; i++) {
        const t = wanted[i];
        const at = t.offset - first.offset;
        const bytes = alone ? span : span.slice(at, at + t.byteLength); // slices own their buffer: aligned views
        bytesDone += t.byteLength;
        yield { name: t.name, dtype: t.dtype, shape: t.shape.slice(), bytes };
        opts.onProgress?.({ bytesDone, bytesTotal, tensor: t.name });
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.sources.values()].map((s) => s.close?.()));
  }
}
