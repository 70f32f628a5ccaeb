// PEFT adapters both ways, checked by PEFT itself (scripts/peft_interop.py with transformers + peft): an adapter
// webart writes (per-module ranks and alphas, rsLoRA) loads in PEFT with every tensor as written and gives webart's
// logits; an adapter PEFT's save_pretrained writes loads in webart through the one adapter_config.json reader and
// gives PEFT's logits. The live check is skipped, saying why, when python3 lacks torch, transformers or peft (as in
// CI); PEFT's own fixture (packages/engine/fixtures/peft-llama, made by scripts/peft_interop.py --fixture) is always
// checked.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, Rng, type Gpu } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { isIgnorableTensor, parseConfig, tensorShapes } from "../config/index.ts";
import { LORA_TARGETS } from "../plan.ts";
import { memorySource, modelFiles, readJson, tensorToF32, WeightReader } from "../weights/index.ts";
import { LoraState, validateLoraConfig, type LoraConfig } from "./lora.ts";
import { Model } from "./model.ts";
import { prefillLogits } from "./testing.ts";
import { readAdapterConfig } from "./peft.ts";
import { uploadWeights } from "./weights.ts";

const ROOT = join(import.meta.dirname, "../../../..");
const FIX = join(import.meta.dirname, "../../fixtures");
const PYTHON = process.env.WEBART_PYTHON ?? "python3";

/** Why the test cannot run here, or null. */
function pythonMissing(): string | null {
  const r = spawnSync(PYTHON, ["-c", "import peft, transformers, torch"], { encoding: "utf8" });
  if (r.error) return `${PYTHON} not found (${r.error.message})`;
  if (r.status !== 0)
    return `${PYTHON} cannot import peft, transformers and torch: ${r.stderr.trim().split("\n").at(-1)}`;
  return null;
}
const missing = pythonMissing();
if (missing)
  console.log(`peft-interop.test.ts skipped: ${missing} (set WEBART_PYTHON to an interpreter that has them)`);

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

async function load(name: string): Promise<Model> {
  const files = await modelFiles(join(FIX, name));
  const config = parseConfig((await readJson(files, "config.json"))!);
  const reader = await WeightReader.open(files);
  const w = await uploadWeights(
    gpu,
    config,
    reader.tensors(tensorShapes(config), { ignore: (n) => isIgnorableTensor(config, n) }),
  );
  await reader.close();
  return new Model(gpu, config, w);
}

const logits = (model: Model, ids: number[]) => prefillLogits(gpu, model, ids);

const readF32 = (p: string) => {
  const b = readFileSync(p);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
};

interface Case {
  name: string;
  /** What webart writes (a run's LoRA config). */
  webart: Partial<LoraConfig>;
  /** What PEFT is given (LoraConfig's fields). */
  peft: Record<string, unknown>;
}

const CASES: Case[] = [
  {
    name: "llama-tiny",
    webart: {
      rank: 4,
      alpha: 8,
      rankPattern: { "model.layers.1.self_attn.q_proj": 2, down_proj: 6 },
      alphaPattern: { v_proj: 3 },
    },
    peft: {
      r: 4,
      lora_alpha: 8,
      target_modules: LORA_TARGETS.map((t) => `${t}_proj`),
      rank_pattern: { "model.layers.0.mlp.up_proj": 2, k_proj: 7 },
      alpha_pattern: { o_proj: 2.5 },
      use_rslora: true,
    },
  },
  {
    name: "qwen3-tiny",
    webart: { rank: 3, alpha: 5, targets: ["q", "v", "o", "up"], useRslora: true, rankPattern: { o_proj: 5 } },
    peft: {
      r: 2,
      lora_alpha: 6,
      target_modules: ["q_proj", "v_proj", "down_proj"],
      rank_pattern: { "layers.1.self_attn.v_proj": 5 },
      alpha_pattern: { "model.layers.0.mlp.down_proj": 1 },
    },
  },
];

/** Loads a PEFT adapter folder onto the model through the one reader (replacing any adapter it holds). */
async function loadPeft(model: Model, dir: string): Promise<LoraConfig> {
  const cfg = readAdapterConfig(
    JSON.parse(readFileSync(join(dir, "adapter_config.json"), "utf8")),
    join(dir, "adapter_config.json"),
  );
  model.lora?.dispose();
  const lora = new LoraState(gpu, model.config, cfg);
  const bytes = readFileSync(join(dir, "adapter_model.safetensors"));
  await lora.load(await WeightReader.fromSource(memorySource(bytes, join(dir, "adapter_model.safetensors"))));
  model.lora = lora;
  return cfg;
}

describe("PEFT's own adapter (committed fixture)", () => {
  it("save_pretrained's files with rank_pattern, alpha_pattern and rsLoRA give PEFT's logits in webart", async () => {
    const dir = join(FIX, "peft-llama");
    const ref = JSON.parse(readFileSync(join(dir, "reference.json"), "utf8")) as { ids: number[] };
    const want = await WeightReader.fromSource(
      memorySource(readFileSync(join(dir, "reference.safetensors")), "reference.safetensors"),
    );
    const model = await load("llama-tiny");
    const cfg = await loadPeft(model, dir);
    expect(cfg).toMatchObject({
      rank: 4,
      useRslora: true,
      rankPattern: { k_proj: 6, "model.layers.0.mlp.up_proj": 2 },
    });
    expect(model.lora!.entries.map((e) => e.rank)).toEqual([4, 6, 4, 4, 4, 2, 4, 4, 6, 4, 4, 4, 4, 4]);
    assertClose("peft-llama", await logits(model, ref.ids), tensorToF32(await want.read("logits")), {
      atol: 2e-4,
      rtol: 1e-4,
    });
    model.dispose();
  });
});

describe.skipIf(missing !== null)("PEFT adapters both ways, checked by PEFT", () => {
  it("webart's adapter gives webart's logits in PEFT; PEFT's save_pretrained adapter gives PEFT's in webart", async () => {
    const dir = mkdtempSync(join(tmpdir(), "webart-peft-"));
    const ids = [99, 301, 222, 115, 43, 251, 127, 189];
    const models = new Map<string, Model>();
    const webartLogits = new Map<string, Float32Array>();
    const job = { out: join(dir, "result.json"), cases: [] as Record<string, unknown>[] };
    for (const c of CASES) {
      const model = await load(c.name);
      models.set(c.name, model);
      const base = await logits(model, ids);
      // A webart adapter with every A and B random (a fresh one has B = 0 and would change nothing).
      const lora = new LoraState(gpu, model.config, validateLoraConfig(c.webart));
      const rng = new Rng(17);
      gpu.write(
        lora.params,
        Float32Array.from({ length: lora.size }, () => 0.2 * rng.normal()),
      );
      model.lora = lora;
      const mine = await logits(model, ids);
      let moved = 0;
      for (let i = 0; i < mine.length; i++) moved = Math.max(moved, Math.abs(mine[i] - base[i]));
      expect(moved, `${c.name}: the adapter changes the logits`).toBeGreaterThan(0.05);
      webartLogits.set(c.name, mine);
      const out = join(dir, c.name, "webart");
      mkdirSync(out, { recursive: true });
      writeFileSync(join(out, "adapter_config.json"), JSON.stringify(lora.adapterConfig(join(FIX, c.name)), null, 2));
      writeFileSync(join(out, "adapter_model.safetensors"), await lora.toSafetensors());
      job.cases.push({
        name: c.name,
        base: join(FIX, c.name),
        ids,
        seed: 5,
        webart_adapter: out,
        webart_adapter_logits: join(dir, c.name, "webart-in-peft.f32"),
        peft_config: c.peft,
        peft_adapter: join(dir, c.name, "peft"),
        peft_adapter_logits: join(dir, c.name, "peft.f32"),
      });
    }
    writeFileSync(join(dir, "job.json"), JSON.stringify(job));
    const py = spawnSync(PYTHON, [join(ROOT, "scripts/peft_interop.py"), join(dir, "job.json")], {
      encoding: "utf8",
      timeout: 300_000,
    });
    if (py.status !== 0) throw new Error(`scripts/peft_interop.py failed (${py.status}):\n${py.stderr}`);
    const result = JSON.parse(readFileSync(job.out, "utf8"));
    console.log(`PEFT: ${JSON.stringify(result)}`);
    for (const c of CASES) {
      const model = models.get(c.name)!;
      // 1. webart -> PEFT: the same logits.
      assertClose(
        `${c.name} webart adapter in PEFT`,
        webartLogits.get(c.name)!,
        readF32(join(dir, c.name, "webart-in-peft.f32")),
        {
          atol: 2e-4,
          rtol: 1e-4,
        },
      );
      // 2. PEFT -> webart: its adapter_config.json through the one reader, its tensors by PEFT's names.
      const cfg = await loadPeft(model, join(dir, c.name, "peft"));
      expect(cfg.rankPattern ?? cfg.alphaPattern).toBeDefined();
      assertClose(
        `${c.name} PEFT adapter in webart`,
        await logits(model, ids),
        readF32(join(dir, c.name, "peft.f32")),
        {
          atol: 2e-4,
          rtol: 1e-4,
        },
      );
      model.dispose();
    }
  }, 600_000);
});
