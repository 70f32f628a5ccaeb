// PEFT's adapter_config.json, read and written in one place: LoRA targets and PEFT's module names, and the checks
// every path that loads an adapter applies alike (`webart serve --adapter`, the web app's import, `webart eval` of
// a checkpoint, a resumed run). What webart cannot represent is refused with the field and what to change, never
// loaded differently from PEFT.
import { layerModule, PROJECTIONS } from "../config/index.ts";
import { LORA_TARGETS, type LoraTarget } from "../plan.ts";
import { validateLoraConfig, type LoraConfig } from "./lora.ts";

/** PEFT's module name (`q_proj`, ...) of each LoRA target. */
export const PEFT_MODULES: Record<LoraTarget, string> = Object.fromEntries(
  LORA_TARGETS.map((t) => [t, PROJECTIONS[t].split(".").at(-1)!]),
) as Record<LoraTarget, string>;
const TARGET_OF = new Map(LORA_TARGETS.map((t) => [PEFT_MODULES[t], t]));

export class AdapterConfigError extends Error {
  override name = "AdapterConfigError";
}

const show = (v: unknown) => JSON.stringify(v) ?? String(v);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The name PEFT matches rank_pattern / alpha_pattern against for a target in a layer. */
export const peftModuleName = (layer: number, t: LoraTarget): string => layerModule(layer, PROJECTIONS[t]);

/** PEFT's pattern lookup: the value of the first key (a regular expression) that matches the end of `module` after a
 *  dot or at its start (PEFT's get_pattern_key), or undefined. */
export function patternValue(pattern: Record<string, number> | undefined, module: string): number | undefined {
  for (const [key, v] of Object.entries(pattern ?? {})) if (new RegExp(`^(?:.*\\.)?(?:${key})$`).test(module)) return v;
  return undefined;
}

/** The rank, alpha and scale PEFT gives one module of an adapter: rank_pattern / alpha_pattern over r / lora_alpha,
 *  scale alpha / r, or alpha / sqrt(r) with rsLoRA. */
export function moduleLora(
  c: LoraConfig,
  layer: number,
  t: LoraTarget,
): { rank: number; alpha: number; scale: number } {
  const name = peftModuleName(layer, t);
  const rank = patternValue(c.rankPattern, name) ?? c.rank;
  const alpha = patternValue(c.alphaPattern, name) ?? c.alpha;
  return { rank, alpha, scale: c.useRslora ? alpha / Math.sqrt(rank) : alpha / rank };
}

/** Fields of newer PEFT versions that change what an adapter computes, refused when set. */
const UNSUPPORTED: [string, string][] = [
  ["exclude_modules", "LoRA on all but some modules is not supported; list target_modules instead"],
  ["lora_bias", "LoRA with a bias on B is not supported"],
  ["target_parameters", "LoRA on parameters (MoE experts) is not supported"],
  ["trainable_token_indices", "trained token embeddings are not supported"],
  ["layer_replication", "replicated layers are not supported"],
  ["use_qalora", "QA-LoRA is not supported"],
  ["alora_invocation_tokens", "activated LoRA is not supported"],
  ["arrow_config", "Arrow routing is not supported"],
];
const isSet = (v: unknown) =>
  v !== undefined &&
  v !== null &&
  v !== false &&
  !(Array.isArray(v) && !v.length) &&
  !(isObject(v) && !Object.keys(v).length);

/**
 * The LoRA configuration of a PEFT adapter_config.json (`where` names the file in messages): r, lora_alpha,
 * target_modules, use_rslora and per-module rank_pattern / alpha_pattern, as PEFT applies them. Refused: DoRA,
 * biases, `fan_in_fan_out`, `modules_to_save`, `layers_to_transform`, a regex `target_modules` and the fields in
 * UNSUPPORTED, since webart would compute something else than PEFT.
 */
export function readAdapterConfig(json: unknown, where: string): LoraConfig {
  const fail = (field: string, msg: string): never => {
    throw new AdapterConfigError(`${where}: ${field} ${msg}`);
  };
  if (!isObject(json)) return fail("", "is not a JSON object");
  const c = json;
  if (c.peft_type !== undefined && c.peft_type !== "LORA")
    fail("peft_type", `${show(c.peft_type)} is not supported: only LORA adapters load`);
  if (c.use_dora === true)
    fail("use_dora", "true: DoRA adapters are not supported; train or export a plain LoRA adapter");
  if (c.bias !== undefined && c.bias !== "none") fail("bias", `${show(c.bias)} is not supported (supported: "none")`);
  if (c.fan_in_fan_out === true) fail("fan_in_fan_out", "true is not supported (it is for GPT-2-style Conv1D layers)");
  if (Array.isArray(c.modules_to_save) && c.modules_to_save.length)
    fail("modules_to_save", `${show(c.modules_to_save)}: fully trained extra modules are not supported`);
  if (c.layers_to_transform !== undefined && c.layers_to_transform !== null)
    fail("layers_to_transform", `${show(c.layers_to_transform)}: LoRA on some layers only is not supported`);
  for (const [field, why] of UNSUPPORTED) if (isSet(c[field])) fail(field, `${show(c[field])}: ${why}`);
  const rank = c.r;
  if (typeof rank !== "number" || !Number.isInteger(rank) || rank < 1)
    return fail("r", `${show(rank)} must be a positive integer`);
  const alpha = c.lora_alpha ?? 8; // PEFT's default
  if (typeof alpha !== "number" || !(alpha > 0)) return fail("lora_alpha", `${show(alpha)} must be a positive number`);
  if (c.use_rslora !== undefined && typeof c.use_rslora !== "boolean")
    fail("use_rslora", `${show(c.use_rslora)} must be true or false`);
  const patterns: Record<"rank_pattern" | "alpha_pattern", Record<string, number> | undefined> = {
    rank_pattern: undefined,
    alpha_pattern: undefined,
  };
  for (const field of ["rank_pattern", "alpha_pattern"] as const) {
    const p = c[field];
    if (p === undefined || p === null) continue;
    if (!isObject(p)) return fail(field, `${show(p)} must be an object of module pattern to value`);
    for (const [k, v] of Object.entries(p)) {
      const ok = field === "rank_pattern" ? Number.isInteger(v) && (v as number) >= 1 : typeof v === "number" && v > 0;
      if (!ok)
        fail(field, `${show(k)}: ${show(v)} must be a positive ${field === "rank_pattern" ? "integer" : "number"}`);
    }
    patterns[field] = p as Record<string, number>;
  }
  const mods = c.target_modules;
  if (typeof mods === "string")
    fail(
      "target_modules",
      `${show(mods)} is a regular expression; list the module names instead (supported: ${[...TARGET_OF.keys()].join(", ")})`,
    );
  if (!Array.isArray(mods) || !mods.length)
    return fail("target_modules", `${show(mods)} must be a non-empty list of module names`);
  const targets = mods.map((m) => {
    const t = typeof m === "string" ? TARGET_OF.get(m.split(".").at(-1)!) : undefined;
    return (
      t ??
      fail(
        "target_modules",
        `contains ${show(m)}, which is not supported (supported: ${[...TARGET_OF.keys()].join(", ")})`,
      )
    );
  });
  try {
    return validateLoraConfig({
      rank,
      alpha,
      targets,
      useRslora: c.use_rslora === true,
      rankPattern: patterns.rank_pattern,
      alphaPattern: patterns.alpha_pattern,
    });
  } catch (e) {
    return fail("", (e as Error).message);
  }
}

/** The adapter_config.json webart writes beside adapter_model.safetensors: the fields PEFT writes, so PEFT loads it
 *  as one of its own. */
export function writeAdapterConfig(lora: LoraConfig, baseModel: string): Record<string, unknown> {
  return {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: baseModel,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: 0,
    bias: "none",
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    use_rslora: lora.useRslora ?? false,
    use_dora: false,
    rank_pattern: { ...lora.rankPattern },
    alpha_pattern: { ...lora.alphaPattern },
    layers_to_transform: null,
    layers_pattern: null,
    modules_to_save: null,
    target_modules: lora.targets.map((t) => PEFT_MODULES[t]),
  };
}
