// The page's handle on the engine worker: a typed comlink proxy.
import * as Comlink from "comlink";
import type { EngineWorker } from "./worker.ts";

let proxy: Comlink.Remote<EngineWorker> | undefined;

export function engine(): Comlink.Remote<EngineWorker> {
  if (!proxy) {
    const worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module", name: "webart-engine" });
    proxy = Comlink.wrap<EngineWorker>(worker);
  }
  return proxy;
}
