// PEFT adapters in and out of the browser: a run's latest checkpoint as a zipped PEFT folder
// (adapter_config.json + adapter_model.safetensors), and such a zip imported as a new run at step 0.
import { unzipSync, zipSync } from "fflate";
import { dec, getDevice, memorySource, readAdapterConfig, WeightReader, writeAdapterConfig } from "webart/engine";
import type { ModelChoice, RunSummary, TrainSettings } from "../api.ts";
import { LoraState, stepDir } from "./internals.ts";
import { baseModelOf, readModelConfig } from "./models.ts";
import { PROJECT, readMeta, runFiles, runNames, summary, writeMeta } from "./runs.ts";
import { store } from "./store.ts";

const FILES = ["adapter_config.json", "adapter_model.safetensors"] as const;

export async function exportAdapter(name: string): Promise<{ fileName: string; bytes: Uint8Array }> {
  const f = runFiles(name);
  const step = await f.latestStep();
  if (step === null) throw new Error(`run "${name}" has no checkpoint yet`);
  const folder = `${name}-step${stepDir(step)}`;
  const entries: Record<string, Uint8Array> = {};
  for (const file of FILES) {
    const b = await store.read(f.path(`checkpoints/${stepDir(step)}/${file}`));
    if (!b) throw new Error(`${f.path(`checkpoints/${stepDir(step)}`)}/${file} is missing`);
    entries[`${folder}/${file}`] = b;
  }
  // Safetensors barely compress; store them so export is instant even for large adapters.
  return { fileName: `${folder}.zip`, bytes: zipSync(entries, { level: 0 }) };
}

/** The two PEFT files from a zip (anywhere in it, same folder). */
function peftFiles(zip: Uint8Array, fileName: string): { config: Record<string, unknown>; weights: Uint8Array } {
  let files: Record<string, Uint8Array>;
  try {
    files = unzipSync(zip);
  } catch (e) {
    throw new Error(`${fileName}: not a readable zip (${(e as Error).message})`, { cause: e });
  }
  const cfgPath = Object.keys(files).find((p) => p === "adapter_config.json" || p.endsWith("/adapter_config.json"));
  if (!cfgPath) throw new Error(`${fileName}: no adapter_config.json inside; export a PEFT adapter folder as a zip`);
  const dir = cfgPath.slice(0, cfgPath.length - "adapter_config.json".length);
  const weights = files[`${dir}adapter_model.safetensors`];
  if (!weights) throw new Error(`${fileName}: ${dir}adapter_config.json has no adapter_model.safetensors beside it`);
  return { config: JSON.parse(dec(files[cfgPath])) as Record<string, unknown>, weights };
}

async function freeName(base: string): Promise<string> {
  const taken = new Set(await runNames());
  const clean =
    base
      .replace(/[^A-Za-z0-9._-]+/g, "-")
      .replace(/^[.-]+/, "")
      .slice(0, 60) || "imported";
  for (let i = 1; ; i++) {
    const n = i === 1 ? clean : `${clean}-${i}`;
    if (!taken.has(n)) return n;
  }
}

/**
 * A new run whose checkpoint 0 is the imported adapter, on `model` (the adapter's own base model is recorded,
 * but need not be loadable here). The adapter is checked tensor by tensor against that model before anything
 * is written.
 */
export async function importAdapter(
  zip: Uint8Array,
  fileName: string,
  model: ModelChoice,
  settings: TrainSettings,
): Promise<RunSummary> {
  const { config, weights } = peftFiles(zip, fileName);
  const lora = readAdapterConfig(config, `${fileName}: adapter_config.json`);
  const baseModel = baseModelOf(model);
  const c = await readModelConfig(baseModel);
  const state = new LoraState(await getDevice(), c, lora);
  try {
    await state.load(await WeightReader.fromSource(memorySource(weights, `${fileName}: adapter_model.safetensors`)));
  } finally {
    state.dispose();
  }
  const name = await freeName(fileName.replace(/\.zip$/i, ""));
  const f = runFiles(name);
  await f.writeJson("model.json", {
    name,
    project: PROJECT,
    base_model: baseModel,
    lora,
    seed: settings.seed,
    trainable: true,
  });
  await store.writeAtomic(
    {
      [f.path(`checkpoints/${stepDir(0)}/adapter_config.json`)]:
        JSON.stringify(writeAdapterConfig(lora, baseModel), null, 2) + "\n",
      [f.path(`checkpoints/${stepDir(0)}/adapter_model.safetensors`)]: weights,
    },
    f.path("latest"),
    "0",
  );
  await writeMeta(name, {
    version: 1,
    model,
    settings: { ...settings, loraRank: lora.rank },
    target: settings.steps,
    lora,
    createdAt: new Date().toISOString(),
    importedFrom: String(config.base_model_name_or_path ?? fileName),
  });
  return summary(name);
}

export { readMeta };
