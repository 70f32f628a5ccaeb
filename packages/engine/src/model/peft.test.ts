// adapter_config.json through its one reader: PEFT's own files load as PEFT scales them (rsLoRA included), webart's
// files read back as written, and what webart cannot represent is refused naming the field.
import { describe, expect, it } from "vitest";
import { LORA_TARGETS } from "../plan.ts";
import { AdapterConfigError, PEFT_MODULES, readAdapterConfig, writeAdapterConfig } from "./peft.ts";

// As PEFT 0.13 writes it for Qwen2.5 (get_peft_model(..., LoraConfig(r=16, lora_alpha=32, target_modules=[...]))).
const peft = {
  alpha_pattern: {},
  auto_mapping: null,
  base_model_name_or_path: "Qwen/Qwen2.5-0.5B-Instruct",
  bias: "none",
  fan_in_fan_out: false,
  inference_mode: true,
  init_lora_weights: true,
  layer_replication: null,
  layers_pattern: null,
  layers_to_transform: null,
  loftq_config: {},
  lora_alpha: 32,
  lora_dropout: 0.05,
  megatron_config: null,
  megatron_core: "megatron.core",
  modules_to_save: null,
  peft_type: "LORA",
  r: 16,
  rank_pattern: {},
  revision: null,
  target_modules: ["v_proj", "q_proj", "down_proj"],
  task_type: "CAUSAL_LM",
  use_dora: false,
  use_rslora: false,
};
const read = (over: Record<string, unknown>) => readAdapterConfig({ ...peft, ...over }, "a/adapter_config.json");

describe("adapter_config.json", () => {
  it("reads PEFT's own file: rank, alpha, targets in webart's order", () => {
    expect(read({})).toEqual({ rank: 16, alpha: 32, targets: ["q", "v", "down"] });
  });

  it("rsLoRA: the same scale as PEFT's alpha / sqrt(r), as an alpha under alpha / r", () => {
    const c = read({ use_rslora: true });
    expect(c.alpha / c.rank).toBeCloseTo(32 / Math.sqrt(16), 12);
  });

  it("rank_pattern / alpha_pattern that repeat r / lora_alpha load; differing ones are refused", () => {
    expect(read({ rank_pattern: { q_proj: 16 }, alpha_pattern: { q_proj: 32 } }).rank).toBe(16);
    expect(() => read({ rank_pattern: { "model.layers.0.self_attn.q_proj": 4 } })).toThrow(
      'a/adapter_config.json: rank_pattern {"model.layers.0.self_attn.q_proj":4}: per-module ranks differing from r 16 are not supported',
    );
    expect(() => read({ alpha_pattern: { v_proj: 8 } })).toThrow(
      /alpha_pattern .*per-module alphas differing from lora_alpha 32/,
    );
  });

  it("refuses, naming the field: DoRA, biases, other PEFT types, regex or unknown modules, extra trained modules", () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ use_dora: true }, /: use_dora true: DoRA adapters are not supported/],
      [{ bias: "all" }, /: bias "all" is not supported/],
      [{ peft_type: "IA3" }, /: peft_type "IA3" is not supported: only LORA adapters load/],
      [{ target_modules: ".*proj" }, /: target_modules ".\*proj" is a regular expression; list the module names/],
      [
        { target_modules: ["q_proj", "lm_head"] },
        /: target_modules contains "lm_head", which is not supported \(supported: q_proj, k_proj/,
      ],
      [
        { modules_to_save: ["lm_head"] },
        /: modules_to_save \["lm_head"\]: fully trained extra modules are not supported/,
      ],
      [{ layers_to_transform: [0, 1] }, /: layers_to_transform \[0,1\]: LoRA on some layers only is not supported/],
      [{ r: 0 }, /: r 0 must be a positive integer/],
      [{ fan_in_fan_out: true }, /: fan_in_fan_out true is not supported/],
    ];
    for (const [over, msg] of cases) {
      expect(() => read(over)).toThrow(AdapterConfigError);
      expect(() => read(over)).toThrow(msg);
    }
  });

  it("what webart writes reads back unchanged, with PEFT's fields and module names", () => {
    const lora = { rank: 8, alpha: 16, targets: [...LORA_TARGETS] };
    const written = writeAdapterConfig(lora, "webart-tiny");
    expect(written).toMatchObject({
      peft_type: "LORA",
      task_type: "CAUSAL_LM",
      base_model_name_or_path: "webart-tiny",
      r: 8,
      lora_alpha: 16,
    });
    expect(written.target_modules).toEqual(LORA_TARGETS.map((t) => PEFT_MODULES[t]));
    expect(readAdapterConfig(JSON.parse(JSON.stringify(written)), "w")).toEqual(lora);
  });
});
