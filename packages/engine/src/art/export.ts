// A run in ART's shape, so it can be continued with OpenPipe ART (vLLM + Unsloth on a GPU cluster): the run folder
// `{project}/models/{name}/` with history.jsonl, checkpoints/{step:04d}/ (the PEFT adapter) and
// trajectories/{split}/{step:04d}.jsonl, one TrajectoryGroup per line, whose sampled Choices carry what ART trains
// from, as vLLM reports it: `logprobs.content` entries { token: "token_id:N", logprob, bytes, top_logprobs } (ART's
// return_tokens_as_token_ids) and vLLM's `token_ids` / `prompt_token_ids`.
import { dec, enc, type RunStore } from "../store/store.ts";
import { Tokenizer } from "../tokenizer/index.ts";
import { detectToolFormat, templateMessages } from "../openai/tools.ts";
import { modelFiles, readJson, readText, type ModelSource } from "../weights/index.ts";
import type { LoraConfig } from "../model/lora.ts";
import { PEFT_MODULES } from "../model/peft.ts";
import { RunFiles, stepDir } from "./checkpoints.ts";
import { promptIds, type ChatTokenizer } from "./tokenize.ts";
import {
  choiceToMessage,
  isChoice,
  isTrainableChoice,
  TrajectoryGroup,
  type History,
  type MessageOrChoice,
  type SampledChoice,
  type Trajectory,
} from "./trajectories.ts";

/** A base model's tokenizer and chat template alone (no weights read), as training tokenizes with them. */
export async function openTokenizer(source: ModelSource): Promise<ChatTokenizer> {
  const files = await modelFiles(source);
  const json = await readJson(files, "tokenizer.json");
  if (!json) throw new Error(`${files.name}: no tokenizer.json (a fast-tokenizer file is needed)`);
  const config = (await readJson(files, "tokenizer_config.json")) ?? {};
  const chatTemplate = (await readText(files, "chat_template.jinja")) ?? undefined;
  const tok = Tokenizer.fromJSON(json, config, { chatTemplate });
  const format = detectToolFormat(tok.chatTemplate);
  return {
    applyChatTemplate: (messages, opts) =>
      tok.applyChatTemplate(templateMessages(format, messages) as never, opts as never),
    encode: (text, o) => tok.encode(text, o),
    decode: (ids, o) => tok.decode(ids, o),
  };
}

const utf8 = (s: string) => [...enc(s)];

/** A sampled Choice as vLLM (with return_tokens_as_token_ids and return_token_ids) reports it to ART. */
export function artChoice(c: SampledChoice, prompt: number[] | null, tok: ChatTokenizer): Record<string, unknown> {
  const { token_ids: ids, token_logprobs: lps, ...rest } = c;
  if (!isTrainableChoice(c) || !ids || !lps) return rest;
  const stored = c.logprobs?.content;
  const tops = stored && stored.length === ids.length ? stored.map((e) => e.top_logprobs ?? []) : null;
  const content = ids.map((id, k) => ({
    token: `token_id:${id}`,
    logprob: lps[k],
    bytes: utf8(tok.decode([id], { skipSpecialTokens: false })),
    top_logprobs: tops?.[k] ?? [],
  }));
  return {
    ...rest,
    logprobs: { content, refusal: null },
    token_ids: ids,
    ...(prompt ? { prompt_token_ids: prompt } : {}),
  };
}

function artHistory(h: History, tok: ChatTokenizer): Record<string, unknown>[] {
  const messages = h.messagesAndChoices.map((m) => (isChoice(m) ? choiceToMessage(m) : m));
  return h.messagesAndChoices.map((m: MessageOrChoice, i) =>
    isChoice(m)
      ? artChoice(m, isTrainableChoice(m) ? promptIds(tok, messages, i, h.tools) : null, tok)
      : (m as unknown as Record<string, unknown>),
  );
}

/** One trajectory in ART's JSON (its Trajectory model's fields). */
export function artTrajectory(t: Trajectory, tok: ChatTokenizer): Record<string, unknown> {
  return {
    messages_and_choices: artHistory({ messagesAndChoices: t.messagesAndChoices, tools: t.tools }, tok),
    tools: t.tools ?? null,
    additional_histories: t.additionalHistories.map((h) => ({
      messages_and_choices: artHistory(h, tok),
      tools: h.tools ?? null,
    })),
    reward: t.reward,
    metrics: t.metrics,
    metadata: t.metadata,
    logs: t.logs,
  };
}

/** One line of an ART trajectories file. */
export function artTrajectoryGroup(g: TrajectoryGroup, tok: ChatTokenizer): Record<string, unknown> {
  return { trajectories: g.trajectories.map((t) => artTrajectory(t, tok)), exceptions: g.exceptions };
}

/** The LoRA of a run as ART's `_internal_config.peft_args` (Unsloth's get_peft_model arguments). Per-module ranks
 *  and alphas are not among them: ART loads those from the checkpoint's adapter_config.json. */
export function artPeftArgs(l: LoraConfig): Record<string, unknown> {
  return {
    r: l.rank,
    lora_alpha: l.alpha,
    target_modules: l.targets.map((t) => PEFT_MODULES[t]),
    ...(l.useRslora ? { use_rslora: true } : {}),
  };
}

export interface ArtExportOptions {
  /** The tokenizer of the run's base model (for prompt_token_ids and token bytes); default: opened from model.json's
   *  base_model. */
  tokenizer?: ChatTokenizer;
  /** The base model ART should load (a Hugging Face id vLLM can serve); default: the run's. */
  baseModel?: string;
  /** Which checkpoints to copy: the latest (ART resumes from it) or all. Default "latest". */
  checkpoints?: "latest" | "all";
}

export interface ArtExportResult {
  /** The run's folder in the destination store. */
  path: string;
  baseModel: string;
  step: number;
  checkpoints: number[];
  /** Trajectory files written, by split. */
  files: Record<string, number>;
  groups: number;
  peftArgs: Record<string, unknown>;
}

/**
 * Writes run `project/name` of `src` into `dst` (e.g. an FsStore at the folder ART's LocalBackend(path=...) reads) in
 * ART's layout and shapes: model.json as ART's Model dumps it, history.jsonl as is, the checkpoints' PEFT adapters,
 * and every trajectories file converted line by line.
 */
export async function exportRunForArt(
  src: RunStore,
  project: string,
  name: string,
  dst: RunStore,
  opts: ArtExportOptions = {},
): Promise<ArtExportResult> {
  const from = new RunFiles(src, project, name);
  const to = new RunFiles(dst, project, name);
  const model = await from.readJson<{ base_model?: string; lora?: LoraConfig }>("model.json");
  if (!model?.base_model || !model.lora)
    throw new Error(`${from.path("model.json")}: not found or not a trainable run (no base_model and lora)`);
  const baseModel = opts.baseModel ?? model.base_model;
  const latest = await from.latestStep();
  if (latest === null) throw new Error(`${from.path("latest")}: the run has no checkpoint`);
  const tok = opts.tokenizer ?? (await openTokenizer(model.base_model));

  const steps = await from.listCheckpoints();
  const copy = (opts.checkpoints ?? "latest") === "all" ? steps : [latest];
  for (const s of copy) {
    for (const f of ["adapter_config.json", "adapter_model.safetensors"]) {
      const p = `checkpoints/${stepDir(s)}/${f}`;
      const b = await src.read(from.path(p));
      if (!b) throw new Error(`${from.path(p)} is missing`);
      if (f === "adapter_config.json") {
        const cfg = JSON.parse(dec(b)) as Record<string, unknown>;
        await to.writeJson(p, { ...cfg, base_model_name_or_path: baseModel });
      } else await dst.write(to.path(p), b);
    }
  }
  const history = await src.read(from.path("history.jsonl"));
  if (history) await dst.write(to.path("history.jsonl"), history);

  const files: Record<string, number> = {};
  let groups = 0;
  for (const p of await src.list(from.path("trajectories"))) {
    const m = /trajectories\/([^/]+)\/(\d+)\.jsonl$/.exec(p);
    if (!m) continue;
    const b = await src.read(p);
    if (!b) continue;
    const lines = dec(b)
      .split("\n")
      .filter((l) => l.trim())
      .map((l, i) => {
        try {
          return artTrajectoryGroup(TrajectoryGroup.fromJSON(JSON.parse(l)), tok);
        } catch (e) {
          throw new Error(`${p}: line ${i + 1}: ${(e as Error).message}`, { cause: e });
        }
      });
    groups += lines.length;
    files[m[1]] = (files[m[1]] ?? 0) + 1;
    await dst.write(
      to.path(`trajectories/${m[1]}/${stepDir(Number(m[2]))}.jsonl`),
      lines.map((l) => JSON.stringify(l)).join("\n") + "\n",
    );
  }
  // ART's model.json is its TrainableModel's model_dump; its LocalBackend rewrites it on register.
  await to.writeJson("model.json", {
    name,
    project,
    entity: null,
    id: null,
    config: null,
    trainable: true,
    base_model: baseModel,
    inference_api_key: null,
    inference_base_url: null,
    inference_model_name: null,
  });
  return {
    path: dst.location?.(to.prefix) ?? to.prefix,
    baseModel,
    step: latest,
    checkpoints: copy,
    files,
    groups,
    peftArgs: artPeftArgs(model.lora),
  };
}
