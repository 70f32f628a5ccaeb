// The engine's Web Worker entry: everything that touches the GPU or the run store runs here, exposed to the
// page through comlink as an EngineApi (api.ts).
import * as Comlink from "comlink";
import { getDevice } from "webart/engine";
import type { EngineApi, EngineEvent } from "./api.ts";
import { installErrorTransfer } from "./errors.ts";
import { exportAdapter, importAdapter } from "./worker/adapters.ts";
import { addLocalModel, clearModelCache, inspectModel, setModelEvents } from "./worker/models.ts";
import { deleteRun, exportTrajectories, history, listRuns, trajectories, trajectorySteps } from "./worker/runs.ts";
import { freeBytes } from "./worker/store.ts";
import * as trainer from "./worker/trainer.ts";

installErrorTransfer();

let listener: ((e: EngineEvent) => void) | undefined;
// Progress events come often; a dropped page listener must never break the engine.
const emit = (e: EngineEvent) => {
  const r: unknown = listener?.(e);
  if (r instanceof Promise) r.catch(() => {});
};
setModelEvents(emit);
// The engine's warnings are for the person watching the run: shown in the page as notices. The skipped-step
// warning is replaced by the trainer's own notice, which says the same in the app's words.
console.warn = (...args: unknown[]) => {
  const message = args.map(String).join(" ");
  if (!/no trajectory has a non-zero advantage/.test(message)) emit({ type: "notice", message });
};
trainer.setTrainerEvents(emit);

const api: EngineApi = {
  async device() {
    const gpu = await getDevice();
    return {
      ...gpu.kind,
      features: [...gpu.features].sort(),
      maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
      maxBufferSize: gpu.limits.maxBufferSize,
      context:
        typeof (globalThis as { WorkerGlobalScope?: unknown }).WorkerGlobalScope !== "undefined" ? "worker" : "page",
    };
  },
  async listen(cb) {
    listener = cb;
  },
  inspectModel,
  addLocalModel,
  listRuns,
  history,
  async train({ name, model, settings }) {
    await trainer.createRun(name, model, settings);
    return trainer.trainLoop(name, settings.reward.kind === "ruler" ? settings.reward.apiKey : undefined);
  },
  async resume(run, opts) {
    await trainer.extendIfDone(run);
    return trainer.trainLoop(run, opts?.apiKey);
  },
  async pause() {
    trainer.requestPause();
  },
  async stop() {
    trainer.requestStop();
  },
  async deleteRun(run) {
    await trainer.forget(run);
    await deleteRun(run);
  },
  trajectorySteps,
  trajectories,
  exportAdapter: async (run) => {
    const r = await exportAdapter(run);
    return Comlink.transfer(r, [r.bytes.buffer]);
  },
  importAdapter,
  reply: trainer.reply,
  checkRun: trainer.checkRun,
  askEmail: trainer.askEmail,
  exportTrajectories,
  async storage() {
    return (await freeBytes()) ?? { usage: 0, quota: 0 };
  },
  clearModelCache,
  loseDevice: trainer.loseDevice,
  speed: trainer.speed,
  speedOfModel: trainer.speedOfModel,
};

Comlink.expose(api);
