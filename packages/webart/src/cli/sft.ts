// `webart sft`: supervised fine-tuning of a run's adapter on conversations from a JSONL file (OpenAI's chat
// fine-tuning lines, ART trajectories or trajectory groups), one step a pass over the data, so that `webart train
// --resume` can go on from it with GRPO.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { iterateDataset, LocalBackend, TrainableModel, Trajectory } from "@webart/engine";
import { GAME_NAMES, GAMES } from "@webart/envs";
import {
  bytes,
  num,
  oneOf,
  parseOptions,
  QUANTIZE_OPTION,
  quantizeOption,
  UsageError,
  type CommandSpec,
} from "./args.ts";

export const SFT = {
  name: "sft",
  about:
    "Supervised fine-tuning (a warm start before GRPO): the run's LoRA adapter learns the assistant turns of the\n" +
    "conversations in a JSONL file, cross-entropy on each turn through its end-of-turn token. A line is OpenAI's\n" +
    'chat fine-tuning format ({"messages": [...], "tools": [...]}; an assistant message with "weight": 0 is\n' +
    'context), an ART trajectory ({"messages_and_choices": [...]}) or a trajectory group ({"trajectories": [...]},\n' +
    "as a run's trajectories/ files hold them). Each pass over the data (--epochs) is one step: one checkpoint in\n" +
    "RUNS/PROJECT/models/NAME, the same run `webart train --env ENV --name NAME --resume` continues.",
  options: {
    data: { arg: "FILE", help: "the conversations, one JSON object a line" },
    env: {
      arg: "NAME",
      default: "tictactoe",
      help: "the game whose run this is: its project, base model and context (tictactoe, 2048 or email)",
    },
    epochs: { arg: "N", default: "1", help: "passes over the data, each in its own seeded order (a step each)" },
    lr: { arg: "X", default: "1e-4", help: "learning rate (AdamW, on the LoRA adapter)" },
    "batch-size": { arg: "N", default: "auto", help: 'conversations per optimizer update ("auto": 8)' },
    "assistant-turns": {
      arg: "all|last",
      default: "all",
      help: "train every assistant turn, or each conversation's last",
    },
    model: {
      arg: "DIR|URL|ID",
      help: "base model: folder, URL or Hugging Face id (default: the env's, as webart train)",
    },
    "max-context": { arg: "N", help: "the longest conversation in tokens (default: the env's, as webart train)" },
    resume: { flag: true, help: "add to a run that already has steps" },
    seed: { arg: "N", default: "1", help: "seed for the data's order and the adapter's initialisation" },
    name: { arg: "NAME", default: "agent", help: "run (model) name" },
    project: { arg: "NAME", help: "project (default: the env)" },
    runs: { arg: "DIR", default: ".art", help: "folder holding the runs" },
    "lora-rank": { arg: "N", default: "8", help: "LoRA rank" },
    "memory-budget": { arg: "SIZE", help: "GPU memory the engine may plan for, e.g. 6GB" },
    ...QUANTIZE_OPTION,
  },
} satisfies CommandSpec;

/** The trajectories of a JSONL file and the line each came from; a line that is none of the formats is refused. */
export function readConversations(file: string): { trajectories: Trajectory[]; lines: number[] } {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`--data ${file}: ${(e as Error).message}`);
  }
  const trajectories: Trajectory[] = [];
  const lines: number[] = [];
  text.split("\n").forEach((raw, i) => {
    const at = `${file}:${i + 1}`;
    if (!raw.trim()) return;
    let j: unknown;
    try {
      j = JSON.parse(raw);
    } catch (e) {
      throw new UsageError(`${at}: not JSON (${(e as Error).message})`);
    }
    const o = (typeof j === "object" && j !== null && !Array.isArray(j) ? j : {}) as Record<string, unknown>;
    const add = (t: Trajectory) => {
      trajectories.push(t);
      lines.push(i + 1);
    };
    if (Array.isArray(o.messages)) {
      o.messages.forEach((m, k) => {
        const role = (m as { role?: unknown } | null)?.role;
        if (typeof role !== "string")
          throw new UsageError(`${at}: messages[${k}] has no "role" (system, user, assistant or tool)`);
      });
      add(new Trajectory({ messagesAndChoices: o.messages as never, tools: (o.tools as never) ?? undefined }));
    } else if (Array.isArray(o.messages_and_choices)) add(Trajectory.fromJSON(o));
    else if (Array.isArray(o.trajectories)) {
      for (const t of o.trajectories) {
        if (!Array.isArray((t as { messages_and_choices?: unknown } | null)?.messages_and_choices))
          throw new UsageError(`${at}: a trajectory of the group has no "messages_and_choices" array`);
        add(Trajectory.fromJSON(t as Record<string, unknown>));
      }
    } else
      throw new UsageError(
        `${at}: expected {"messages": [...]} (OpenAI's fine-tuning format), an ART trajectory ` +
          `({"messages_and_choices": [...]}) or a trajectory group ({"trajectories": [...]})`,
      );
  });
  if (!trajectories.length) throw new UsageError(`--data ${file}: no conversations in it`);
  return { trajectories, lines };
}

export async function sftCommand(argv: string[]): Promise<number> {
  const a = parseOptions(SFT, argv);
  if (!a.data) throw new UsageError("--data FILE is required");
  const env = oneOf("env", a.env, GAME_NAMES);
  const game = GAMES[env];
  const epochs = num("epochs", a.epochs, { int: true, min: 1 });
  const lr = num("lr", a.lr, { min: 0 });
  if (!(lr > 0)) throw new UsageError("--lr must be > 0");
  const batchSize = a["batch-size"] === "auto" ? "auto" : num("batch-size", a["batch-size"], { int: true, min: 1 });
  const assistantTurns = oneOf("assistant-turns", a["assistant-turns"], ["all", "last"] as const);
  const maxContext = num("max-context", a["max-context"] ?? String(game.maxContext), { int: true, min: 2 });
  const seed = num("seed", a.seed, { int: true, min: 0 });
  const rank = num("lora-rank", a["lora-rank"], { int: true, min: 1 });
  const memoryBudget = bytes("memory-budget", a["memory-budget"]);
  const { trajectories, lines } = readConversations(a.data);
  const project = a.project || env;
  const quantize = quantizeOption(a.quantize);
  const backend = new LocalBackend({ path: a.runs, engine: { kvSlots: 1, maxContext, memoryBudget, quantize } });
  const model = new TrainableModel({ name: a.name, project, baseModel: a.model ?? game.model, seed, lora: { rank } });
  try {
    await model.register(backend);
    const step = await model.getStep();
    if (step > 0 && !a.resume)
      throw new UsageError(
        `run ${project}/${a.name} already has ${step} steps in ${a.runs}: pass --resume to add to it, or --name for a new run`,
      );
    console.log(
      `supervised fine-tuning ${project}/${a.name} from step ${step}: ${trajectories.length} conversations from ` +
        `${a.data}, ${epochs} epoch${epochs > 1 ? "s" : ""}, lr ${lr}, batches of ${batchSize}, ${assistantTurns} assistant turns`,
    );
    // Each epoch in its own seeded order, the same on a rerun: one batch of every conversation an epoch.
    const indices = trajectories.map((_, i) => i);
    for (const { items: order, epoch } of iterateDataset(indices, {
      groupsPerStep: indices.length,
      numEpochs: epochs,
      seed,
    })) {
      const e = epoch + 1;
      const r = await model
        .trainSft(
          order.map((i) => trajectories[i]),
          { learningRate: lr, batchSize, assistantTurns },
        )
        .catch((err: Error) => {
          // The engine names a trajectory by its place in this epoch's order: name its line in the file too.
          const m = /trajectory (\d+)/.exec(err.message);
          if (m) err.message += ` (${a.data}:${lines[order[Number(m[1])]]})`;
          throw err;
        });
      const m = r.metrics;
      console.log(
        `epoch ${e}/${epochs}: step ${r.step}, loss ${m.loss.toFixed(4)} (first batch ${m.batch_losses[0].toFixed(4)}, ` +
          `last ${m.batch_losses[m.batch_losses.length - 1].toFixed(4)}), ${m.num_batches} batches, ` +
          `${m.num_tokens_trained} tokens trained, grad ${m.grad_norm.toFixed(3)}, ${m.step_seconds.toFixed(1)}s`,
      );
    }
  } finally {
    await backend.close();
  }
  console.log(
    `checkpoints in ${join(a.runs, project, "models", a.name, "checkpoints")}; ` +
      `go on with GRPO: webart train --env ${env} --name ${a.name}${a.project ? ` --project ${project}` : ""}` +
      `${a.runs !== ".art" ? ` --runs ${a.runs}` : ""}${a.model ? ` --model ${a.model}` : ""}` +
      `${rank !== 8 ? ` --lora-rank ${rank}` : ""} --resume`,
  );
  return 0;
}
