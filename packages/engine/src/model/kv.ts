// The KV cache: per layer, K and V of shape (S, Tmax, KV, D) f32 — S sequence slots of Tmax positions.
import type { Gpu, Recorder } from "@webart/gpu";
import type { ModelConfig } from "../config/index.ts";

export class KvCache {
  readonly k: GPUBuffer[] = [];
  readonly v: GPUBuffer[] = [];
  readonly rowFloats: number;
  /** Copies recorded by copySlot, applied at the start of the next recorder. */
  private pending: { src: number; dst: number; len: number }[] = [];

  constructor(
    private gpu: Gpu,
    config: ModelConfig,
    readonly slots: number,
    readonly tmax: number,
  ) {
    this.rowFloats = config.numKvHeads * config.headDim;
    const bytes = slots * tmax * this.rowFloats * 4;
    if (bytes > gpu.maxStorageBinding) {
      throw new Error(
        `KV cache: ${slots} slots x ${tmax} positions need ${(bytes / 2 ** 20).toFixed(0)} MiB per layer, over the ` +
          `${(gpu.maxStorageBinding / 2 ** 20).toFixed(0)} MiB storage binding; use fewer slots or a shorter context`,
      );
    }
    for (let l = 0; l < config.numLayers; l++) {
      this.k.push(gpu.buffer(bytes, "kv", `kv k ${l}`));
      this.v.push(gpu.buffer(bytes, "kv", `kv v ${l}`));
    }
  }

  get bytes(): number {
    return this.k.length * 2 * this.k[0].size;
  }

  /** Slot copies waiting for the next recorder. */
  get pendingCopies(): number {
    return this.pending.length;
  }

  copySlot(src: number, dst: number, len: number): void {
    this.pending.push({ src, dst, len });
  }

  /** Records the pending slot copies (call first in a step's recorder) and returns them, for requeue() should that
   *  recorder be dropped. WebGPU forbids a copy within one buffer, so rows go through a scratch buffer. */
  flush(rec: Recorder): { src: number; dst: number; len: number }[] {
    const copies = this.pending;
    const row = this.rowFloats * 4;
    for (const { src, dst, len } of this.pending) {
      const tmp = this.gpu.buffer(len * row, "kv", "kv copy");
      for (const buf of [...this.k, ...this.v]) {
        rec.copy(buf, src * this.tmax * row, tmp, 0, len * row);
        rec.copy(tmp, 0, buf, dst * this.tmax * row, len * row);
      }
      this.gpu.release(tmp);
    }
    this.pending = [];
    return copies;
  }

  /** Puts copies that flush() recorded into a recorder that was never submitted back in front of the pending ones. */
  requeue(copies: { src: number; dst: number; len: number }[]): void {
    this.pending = [...copies, ...this.pending];
  }

  dispose(): void {
    this.gpu.release(...this.k, ...this.v);
    this.k.length = 0;
    this.v.length = 0;
  }
}
