// adapter_config.json through its one reader: PEFT's own files load as PEFT scales them (rsLoRA included), webart's
// files read back as written, and what webart cannot represent is refused naming the field.
import { describe, expect, it } from "vitest";
import { LORA_TARGETS } from "../plan.ts";
import {
  AdapterConfigError,
  moduleLora,
  PEFT_MODULES,
  patternValue,
  readAdapterConfig,
  writeAdapterConfig,
} from "./peft.ts";

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

  it("rsLoRA: PEFT's scale alpha / sqrt(r), kept as use_rslora", () => {
    const c = read({ use_rslora: true });
    expect(c).toEqual({ rank: 16, alpha: 32, targets: ["q", "v", "down"], useRslora: true });
    expect(moduleLora(c, 0, "q").scale).toBeCloseTo(32 / Math.sqrt(16), 12);
    expect(moduleLora(read({}), 0, "q").scale).toBe(2);
  });

  it("rank_pattern / alpha_pattern: per-module rank and alpha, matched as PEFT matches them", () => {
    const c = read({
      rank_pattern: { "model.layers.1.self_attn.q_proj": 4, down_proj: 8 },
      alpha_pattern: { "layers\\.[02]\\.self_attn\\.v_proj": 64 },
      use_rslora: true,
    });
    expect(c.rankPattern).toEqual({ "model.layers.1.self_attn.q_proj": 4, down_proj: 8 });
    expect(moduleLora(c, 1, "q")).toEqual({ rank: 4, alpha: 32, scale: 32 / 2 });
    expect(moduleLora(c, 0, "q")).toEqual({ rank: 16, alpha: 32, scale: 32 / 4 });
    expect(moduleLora(c, 3, "down").rank).toBe(8);
    expect(moduleLora(c, 2, "v")).toEqual({ rank: 16, alpha: 64, scale: 64 / 4 });
    expect(moduleLora(c, 1, "v").alpha).toBe(32);
    // A key matches whole dotted segments at the end of the name; the first matching key wins.
    expect(patternValue({ proj: 1 }, "model.layers.0.self_attn.q_proj")).toBeUndefined();
    expect(patternValue({ q_proj: 1, "self_attn.q_proj": 2 }, "model.layers.0.self_attn.q_proj")).toBe(1);
    expect(patternValue({ "layers.1.mlp.up_proj": 3 }, "model.layers.11.mlp.up_proj")).toBeUndefined();
    // Empty patterns (as PEFT writes them) are no patterns.
    expect(read({ rank_pattern: {}, alpha_pattern: {} })).toEqual(read({}));
    expect(() => read({ rank_pattern: { q_proj: 2.5 } })).toThrow(
      'a/adapter_config.json: rank_pattern "q_proj": 2.5 must be a positive integer',
    );
    expect(() => read({ alpha_pattern: { "(": 4 } })).toThrow(
      'alphaPattern: key "(" is not a valid regular expression',
    );
    expect(() => read({ rank_pattern: { q_proj: 512 } })).toThrow(
      /rankPattern: "q_proj": 512 must be an integer in \[1, 256\]/,
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
      [{ exclude_modules: ["model.layers.0.mlp.up_proj"] }, /: exclude_modules .*LoRA on all but some modules/],
      [{ lora_bias: true }, /: lora_bias true: LoRA with a bias on B is not supported/],
      [{ trainable_token_indices: [5] }, /: trainable_token_indices \[5\]: trained token embeddings/],
      [{ use_rslora: "yes" }, /: use_rslora "yes" must be true or false/],
    ];
    for (const [over, msg] of cases) {
      expect(() => read(over)).toThrow(AdapterConfigError);
      expect(() => read(over)).toThrow(msg);
    }
  });

  it("PEFT 0.21's defaults for the newer fields load", () => {
    const newer = { exclude_modules: null, lora_bias: false, target_parameters: null, use_qalora: false };
    expect(read({ ...newer, trainable_token_indices: null, layer_replication: null, eva_config: null })).toEqual(
      read({}),
    );
  });

  it("what webart writes reads back unchanged, with PEFT's fields and module names", () => {
    const patterned = {
      rank: 8,
      alpha: 16,
      targets: [...LORA_TARGETS],
      useRslora: true,
      rankPattern: { down_proj: 4 },
      alphaPattern: { "model.layers.0.self_attn.q_proj": 3 },
    };
    const back = readAdapterConfig(JSON.parse(JSON.stringify(writeAdapterConfig(patterned, "m"))), "w");
    expect(back).toEqual(patterned);
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
