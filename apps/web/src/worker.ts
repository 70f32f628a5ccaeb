// The engine's Web Worker entry: everything that touches the GPU runs here, exposed through comlink.
import * as Comlink from "comlink";
import { getDevice, type AdapterSummary } from "@webart/engine/gpu";

export interface AdapterInfo extends AdapterSummary {
  features: string[];
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
  /** Where the engine runs: "worker" inside a Web Worker. */
  context: string;
}

const api = {
  async adapter(): Promise<AdapterInfo> {
    const gpu = await getDevice();
    return {
      ...gpu.adapter,
      features: [...gpu.features].sort(),
      maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
      maxBufferSize: gpu.limits.maxBufferSize,
      context: typeof (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope !== "undefined" ? "worker" : "page",
    };
  },
};

export type EngineWorker = typeof api;
Comlink.expose(api);
