// PEFT's adapter_config.json, read and written in one place: LoRA targets and PEFT's module names, and the checks
// every path that loads an adapter applies alike (`webart serve --adapter`, the web app's import, `webart eval` of
// a checkpoint, a resumed run). What webart cannot represent is refused with the field and what to change, never
// loaded differently from PEFT.
import { LORA_TARGETS, type LoraTarget } from "../plan.ts";
import { validateLoraConfig, type LoraConfig } from "./lora.ts";

/** The HF module path of each adaptable projection, inside `model.layers.{i}`. */
export const LORA_MODULES: Record<LoraTarget, string> = {
  q: "self_attn.q_proj",
  k: "self_attn.k_proj",
  v: "self_attn.v_proj",
  o: "self_attn.o_proj",
  gate: "mlp.gate_proj",
  up: "mlp.up_proj",
  down: "mlp.down_proj",
};

/** PEFT's module name (`q_proj`, ...) of each LoRA target. */
export const PEFT_MODULES: Record<LoraTarget, string> = Object.fromEntries(
  LORA_TARGETS.map((t) => [t, LORA_MODULES[t].split(".").at(-1)!]),
) as Record<LoraTarget, string>;
const TARGET_OF = new Map(LORA_TARGETS.map((t) => [PEFT_MODULES[t], t]));

export class AdapterConfigError extends Error {
  override name = "AdapterConfigError";
}

const show = (v: unknown) => JSON.stringify(v) ?? String(v);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The LoRA configuration of a PEFT adapter_config.json (`where` names the file in messages). rsLoRA
 * (`use_rslora`, scale alpha / sqrt(r)) becomes the alpha that gives the same scale under alpha / r;
 * `rank_pattern` / `alpha_pattern` are taken when they repeat `r` / `lora_alpha`, and refused otherwise, as are DoRA,
 * biases, `fan_in_fan_out`, `modules_to_save`, `layers_to_transform` and a regex `target_modules`.
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
  const rank = c.r;
  if (typeof rank !== "number" || !Number.isInteger(rank) || rank < 1)
    return fail("r", `${show(rank)} must be a positive integer`);
  const alpha = c.lora_alpha ?? 8; // PEFT's default
  if (typeof alpha !== "number" || !(alpha > 0)) return fail("lora_alpha", `${show(alpha)} must be a positive number`);
  for (const [field, same] of [
    ["rank_pattern", rank],
    ["alpha_pattern", alpha],
  ] as const) {
    const p = c[field];
    if (p === undefined || p === null) continue;
    if (!isObject(p)) fail(field, `${show(p)} must be an object`);
    const other = Object.entries(p as Record<string, unknown>).filter(([, v]) => v !== same);
    if (other.length)
      fail(
        field,
        `${show(Object.fromEntries(other))}: per-module ${field === "rank_pattern" ? "ranks" : "alphas"} differing from ${field === "rank_pattern" ? "r" : "lora_alpha"} ${same} are not supported`,
      );
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
  // rsLoRA scales by alpha / sqrt(r); the engine scales by alpha / r: the same scale needs alpha * sqrt(r).
  const scaleAlpha = c.use_rslora === true ? alpha * Math.sqrt(rank) : alpha;
  try {
    return validateLoraConfig({ rank, alpha: scaleAlpha, targets });
  } catch (e) {
    return fail("", (e as Error).message);
  }
}

/** The adapter_config.json webart writes beside adapter_model.safetensors: what PEFT reads to load it. */
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
    use_rslora: false,
    target_modules: lora.targets.map((t) => PEFT_MODULES[t]),
  };
}
