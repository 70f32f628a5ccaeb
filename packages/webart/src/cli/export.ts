// `webart export --format art`: a run copied into a folder in OpenPipe ART's layout and JSON, with the Python that
// continues it there (ART's LocalBackend(path=...) resumes at the exported checkpoint). `--format merged`: a
// checkpoint merged into its base model, as a model folder (merged.ts).
import { exportRunForArt, FsStore } from "@webart/engine";
import { oneOf, parseOptions, refuseGiven, UsageError, type CommandSpec } from "./args.ts";
import { exportMerged } from "./merged.ts";

export const EXPORT = {
  name: "export",
  about:
    "Writes a run in another trainer's format. --format art: OUT/{project}/models/{name}/ as OpenPipe ART keeps a run\n" +
    "(model.json, history.jsonl, checkpoints/{step}/ with the PEFT adapter, trajectories/{split}/{step}.jsonl whose\n" +
    "Choices carry vLLM-style logprobs and token ids), and prints the Python that continues it with ART.\n" +
    "--format merged: a checkpoint merged into the run's base model (W + scale·B·A in each adapted projection), as a\n" +
    "Hugging Face model folder (model.safetensors in the base's dtype, its config and tokenizer files) in the base's\n" +
    "layout, loaded without PEFT (webart --model OUT; tools that load the base model should load it too).",
  options: {
    format: { arg: "NAME", default: "art", help: "art or merged" },
    name: { arg: "NAME", default: "agent", help: "run (model) name" },
    project: { arg: "NAME", default: "tictactoe", help: "project" },
    runs: { arg: "DIR", default: ".art", help: "folder holding the runs" },
    out: {
      arg: "DIR",
      help: "folder to write: ART's LocalBackend path (default art-export); merged: a new or empty folder\n(default NAME-merged)",
    },
    "base-model": {
      arg: "ID",
      help: "the base model ART loads, a Hugging Face id vLLM can serve (default: the run's base model)",
    },
    checkpoints: { arg: "WHICH", help: "art: latest or all (default latest)" },
    checkpoint: { arg: "STEP", help: "merged: the checkpoint, a step number or latest (default latest)" },
  },
} satisfies CommandSpec;

/** The Python that continues the exported run with ART (its TrainableModel resumes at the latest checkpoint). */
export function artContinueScript(r: {
  name: string;
  project: string;
  out: string;
  baseModel: string;
  peftArgs: Record<string, unknown>;
}): string {
  const py = (v: unknown): string =>
    JSON.stringify(v)
      .replace(/\btrue\b/g, "True")
      .replace(/\bfalse\b/g, "False")
      .replace(/\bnull\b/g, "None");
  return `import asyncio
import art
from art.local import LocalBackend

async def main():
    model = art.TrainableModel(
        name=${py(r.name)},
        project=${py(r.project)},
        base_model=${py(r.baseModel)},
        # The exported adapter's LoRA (ART loads the adapter itself, per-module ranks included, from
        # checkpoints/{step}/adapter_config.json and continues it).
        _internal_config=art.dev.InternalModelConfig(peft_args=${py(r.peftArgs)}),
    )
    await model.register(LocalBackend(path=${py(r.out)}))
    print("continuing at step", await model.get_step())
    # ... your rollouts, then: await model.train(groups) (or backend.train(model, groups)) as usual.

asyncio.run(main())
`;
}

export async function exportCommand(argv: string[]): Promise<number> {
  const a = parseOptions(EXPORT, argv);
  const format = oneOf("format", a.format, ["art", "merged"] as const);
  if (format === "merged") {
    refuseGiven(argv, ["checkpoints", "base-model"], "--format merged");
    const c = a.checkpoint ?? "latest";
    if (c !== "latest" && !/^\d+$/.test(c))
      throw new UsageError(`--checkpoint ${JSON.stringify(c)}: expected a step number or latest`);
    const out = a.out ?? `${a.name}-merged`;
    if (out === a.runs) throw new UsageError("--out: must differ from --runs (the run would be overwritten)");
    const r = await exportMerged({
      runs: a.runs,
      project: a.project,
      name: a.name,
      out,
      checkpoint: c === "latest" ? c : Number(c),
    });
    console.log(
      `merged ${a.project}/${a.name} checkpoint ${r.step} into ${r.baseModel}: ${r.merged} projections; wrote ${r.out} ` +
        `(${r.files.join(", ")}; ${(r.bytes / 2 ** 20).toFixed(1)} MiB of weights). It has the base model's ` +
        `layout: webart --model ${r.out}, or the tools that load the base model`,
    );
    if (r.trainedOn)
      console.log(
        `note: the run trained on ${r.trainedOn} weights (--quantize ${r.trainedOn}); its adapter is merged into the ` +
          `base model's own weights, as QLoRA adapters are, so the merged model differs from the trained one by the ` +
          `quantization`,
      );
    return 0;
  }
  refuseGiven(argv, ["checkpoint"], "--format art");
  const checkpoints = oneOf("checkpoints", a.checkpoints ?? "latest", ["latest", "all"] as const);
  const outDir = a.out ?? "art-export";
  if (outDir === a.runs) throw new UsageError("--out: must differ from --runs (the run would be overwritten)");
  const r = await exportRunForArt(await FsStore.open(a.runs), a.project, a.name, await FsStore.open(outDir), {
    baseModel: a["base-model"],
    checkpoints,
  });
  const files = Object.entries(r.files)
    .map(([split, n]) => `${n} ${split}`)
    .join(", ");
  console.log(
    `exported ${a.project}/${a.name} to ${r.path}: checkpoint ${r.checkpoints.join(", ")}, ${r.groups} trajectory groups ` +
      `in ${files || "no"} files, history.jsonl`,
  );
  if (!/^[\w.-]+\/[\w.-]+$/.test(r.baseModel))
    console.log(
      `note: the base model "${r.baseModel}" is not a Hugging Face id; pass --base-model with the id of the same ` +
        `weights for ART (or edit model.json and the adapter_config.json files)`,
    );
  console.log(`\ncontinue with ART (pip install openpipe-art[backend]) on a machine with a GPU:\n`);
  console.log(
    artContinueScript({ name: a.name, project: a.project, out: outDir, baseModel: r.baseModel, peftArgs: r.peftArgs }),
  );
  return 0;
}
