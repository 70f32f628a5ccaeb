// `webart export --format art`: a run copied into a folder in OpenPipe ART's layout and JSON, with the Python that
// continues it there (ART's LocalBackend(path=...) resumes at the exported checkpoint).
import { exportRunForArt, FsStore } from "@webart/engine";
import { oneOf, parseOptions, UsageError, type CommandSpec } from "./args.ts";

export const EXPORT = {
  name: "export",
  about:
    "Writes a run in another trainer's format. --format art: OUT/{project}/models/{name}/ as OpenPipe ART keeps a run\n" +
    "(model.json, history.jsonl, checkpoints/{step}/ with the PEFT adapter, trajectories/{split}/{step}.jsonl whose\n" +
    "Choices carry vLLM-style logprobs and token ids), and prints the Python that continues it with ART.",
  options: {
    format: { arg: "NAME", default: "art", help: "art (the only one so far)" },
    name: { arg: "NAME", default: "agent", help: "run (model) name" },
    project: { arg: "NAME", default: "tictactoe", help: "project" },
    runs: { arg: "DIR", default: ".art", help: "folder holding the runs" },
    out: { arg: "DIR", default: "art-export", help: "folder to write (ART's LocalBackend path)" },
    "base-model": {
      arg: "ID",
      help: "the base model ART loads, a Hugging Face id vLLM can serve (default: the run's base model)",
    },
    checkpoints: { arg: "WHICH", default: "latest", help: "latest or all" },
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
  oneOf("format", a.format, ["art"] as const);
  const checkpoints = oneOf("checkpoints", a.checkpoints, ["latest", "all"] as const);
  if (a.out === a.runs) throw new UsageError("--out: must differ from --runs (the run would be overwritten)");
  const r = await exportRunForArt(await FsStore.open(a.runs), a.project, a.name, await FsStore.open(a.out), {
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
    artContinueScript({ name: a.name, project: a.project, out: a.out, baseModel: r.baseModel, peftArgs: r.peftArgs }),
  );
  return 0;
}
