// `webart export --format merged`: a run's checkpoint merged into its base model's weights (mergeAdapter), written as
// a Hugging Face model folder: model.safetensors in the base's dtype, and the base's config, generation config and
// tokenizer files. It loads wherever the base model does, without PEFT.
import { mkdir, open, readdir, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { FsStore, mergeAdapter, openModel, readAdapterConfig, RunFiles, stepDir } from "@webart/engine";
import { UsageError } from "./args.ts";

/** The base model's files besides its weights that a model folder carries, copied where the base has them. */
const MODEL_FILES = [
  "config.json",
  "generation_config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "chat_template.jinja",
  "vocab.json",
  "merges.txt",
  "tokenizer.model",
];

export interface MergedExport {
  out: string;
  step: number;
  baseModel: string;
  merged: number;
  bytes: number;
  files: string[];
  /** The run trained on q4 weights (its model.json): merged into the file's own weights all the same. */
  trainedOn?: "q4";
}

export async function exportMerged(o: {
  runs: string;
  project: string;
  name: string;
  out: string;
  checkpoint: number | "latest";
}): Promise<MergedExport> {
  const run = new RunFiles(await FsStore.open(o.runs), o.project, o.name);
  const saved = await run.readJson<{ base_model?: string; quantize?: "q4" }>("model.json");
  const baseModel = saved?.base_model;
  if (baseModel === undefined)
    throw new UsageError(`no run ${o.project}/${o.name} in ${o.runs} (${run.path("model.json")} is missing)`);
  const step = o.checkpoint === "latest" ? await run.latestStep() : o.checkpoint;
  if (step === null) throw new UsageError(`run ${o.project}/${o.name} has no checkpoint yet`);
  const steps = await run.listCheckpoints();
  if (!steps.includes(step))
    throw new UsageError(`run ${o.project}/${o.name} has no checkpoint ${step} (it has ${steps.join(", ") || "none"})`);
  const kind = await stat(o.out).then(
    (s) => (s.isDirectory() ? "folder" : "file"),
    () => "none",
  );
  if (kind === "file") throw new UsageError(`--out ${o.out} is a file: give a new or empty folder`);
  if (kind === "folder" && (await readdir(o.out)).length)
    throw new UsageError(`--out ${o.out} is not empty: give a new or empty folder (nothing there is overwritten)`);
  const ck = await run.readCheckpoint(step);
  const lora = readAdapterConfig(ck.adapterConfig, `${run.path(`checkpoints/${stepDir(step)}`)}/adapter_config.json`);
  // The base as the engine opens it: its config parsed, its tensors checked against it.
  const base = await openModel(baseModel);
  const files = base.files;
  try {
    const m = await mergeAdapter(base.config, base.weights, lora, ck.adapter, {
      webart_merged: `${o.project}/${o.name} checkpoint ${step} into ${baseModel}`,
    });
    await mkdir(o.out, { recursive: true });
    const written: string[] = [];
    for (const f of MODEL_FILES) {
      const src = await files.open(f);
      if (!src) continue;
      await writeFile(join(o.out, f), await src.read(0, src.size));
      await src.close?.();
      written.push(f);
    }
    // Written a tensor at a time: a model of billions of weights is never held whole.
    const h = await open(join(o.out, "model.safetensors"), "w");
    try {
      await h.write(m.prefix);
      for await (const t of m.tensors()) await h.write(t);
    } finally {
      await h.close();
    }
    written.push("model.safetensors");
    const bytes = m.prefix.byteLength + m.dataBytes;
    const q4 = saved?.quantize ? { trainedOn: saved.quantize } : {};
    return { out: o.out, step, baseModel, merged: m.merged, bytes, files: written, ...q4 };
  } finally {
    await base.close();
  }
}
