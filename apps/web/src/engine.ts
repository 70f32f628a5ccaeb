// The page's handle on the engine worker: a typed comlink proxy of the EngineApi, plus a subscription to its
// events. Nothing here touches the GPU; the page stays responsive while the worker trains.
import * as Comlink from "comlink";
import type { EngineApi, EngineEvent } from "./api.ts";
import { installErrorTransfer } from "./errors.ts";

installErrorTransfer();

let proxy: Comlink.Remote<EngineApi> | undefined;
const listeners = new Set<(e: EngineEvent) => void>();

export function engine(): Comlink.Remote<EngineApi> {
  if (!proxy) {
    const worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module", name: "webart-engine" });
    proxy = Comlink.wrap<EngineApi>(worker);
    void proxy.listen(Comlink.proxy((e: EngineEvent) => listeners.forEach((l) => l(e))));
  }
  return proxy;
}

/** Calls `f` with every engine event until the returned function is called. */
export function onEngineEvent(f: (e: EngineEvent) => void): () => void {
  listeners.add(f);
  return () => listeners.delete(f);
}
