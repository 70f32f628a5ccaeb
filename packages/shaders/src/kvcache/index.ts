// KV-cache write dispatch: new k, v rows (N, KV, D) into the caches (S, Tmax, KV, D) at each token's (slot, pos).
import { Params, type Gpu, type KernelSpec, type Recorder } from "@webart/gpu";
import code from "./write.wgsl";

const WG = 256;
export const kvcacheForwardSpec: KernelSpec = { name: "kvcache_forward", code, overrides: { WG } };

export interface KvCacheDims {
  /** N new tokens. */
  n: number;
  kv: number;
  d: number;
  /** S sequence slots. */
  slots: number;
  /** Tmax rows per slot. */
  tmax: number;
}

export interface KvCacheBuffers {
  slotPos: GPUBuffer; // (N, 2) u32: each token's (slot, pos)
  k: GPUBuffer; // (N, KV, D)
  v: GPUBuffer; // (N, KV, D)
  kc: GPUBuffer; // (S, Tmax, KV, D)
  vc: GPUBuffer; // (S, Tmax, KV, D)
}

/** Scatters k, v (N, KV, D) into kc, vc (S, Tmax, KV, D); tokens with slot >= S or pos >= Tmax are skipped. */
export function kvcacheWrite(gpu: Gpu, rec: Recorder, bufs: KvCacheBuffers, dims: KvCacheDims): void {
  const { n, kv, d, slots, tmax } = dims;
  if (slots * tmax * kv * d >= 2 ** 32)
    throw new Error(`kvcache: ${slots}x${tmax}x${kv}x${d} elements overflow u32 indexing`);
  const params = new Params().u32(n, kv * d, slots, tmax);
  const { slotPos, k, v, kc, vc } = bufs;
  rec.dispatch(kvcacheForwardSpec, [slotPos, k, v, kc, vc], gpu.grid(Math.ceil((n * kv * d) / WG)), params);
}
