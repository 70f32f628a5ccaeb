// LoRA adapter state: all layers' A (R, in) and B (out, R) in one flat f32 buffer (with gradients and
// AdamW moments alike), saved and loaded in PEFT's names and shapes.
import type { Gpu } from "@webart/gpu";
import { Rng } from "@webart/gpu";
import type { LoraSlot } from "@webart/shaders";
import type { ModelConfig } from "../config/index.ts";
import { LORA_TARGETS, type LoraTarget } from "../plan.ts";
import { tensorToF32, writeSafetensors, type WeightReader } from "../weights/index.ts";
import { layerModule, PROJECTIONS } from "../config/index.ts";
import { moduleLora, writeAdapterConfig } from "./peft.ts";

export interface LoraConfig {
  /** PEFT's r: the rank of every module no rankPattern key matches. */
  rank: number;
  /** PEFT's lora_alpha: the scale is alpha / rank (alpha / sqrt(rank) with useRslora). */
  alpha: number;
  targets: LoraTarget[];
  /** rsLoRA (PEFT's use_rslora): scale alpha / sqrt(rank). */
  useRslora?: boolean;
  /** PEFT's rank_pattern: module-name pattern (a regular expression matched against the end of
   *  `model.layers.{i}.self_attn.q_proj` at a dot) to that module's rank; the first matching key wins. */
  rankPattern?: Record<string, number>;
  /** PEFT's alpha_pattern, matched as rankPattern. */
  alphaPattern?: Record<string, number>;
}

export const DEFAULT_LORA: LoraConfig = { rank: 8, alpha: 16, targets: [...LORA_TARGETS] };

export interface LoraEntry {
  layer: number;
  target: LoraTarget;
  in: number;
  out: number;
  /** This module's rank R and scale (alpha / R, or alpha / sqrt(R) with rsLoRA), as PEFT resolves its patterns. */
  rank: number;
  scale: number;
  /** Element offsets of A and B in the flat buffers. */
  a: number;
  b: number;
}

export function loraDims(c: ModelConfig, t: LoraTarget): { in: number; out: number } {
  const { hiddenSize: C, intermediateSize: F, numHeads: H, numKvHeads: KV, headDim: D } = c;
  const d: Record<LoraTarget, [number, number]> = {
    q: [C, H * D],
    k: [C, KV * D],
    v: [C, KV * D],
    o: [H * D, C],
    gate: [C, F],
    up: [C, F],
    down: [F, C],
  };
  return { in: d[t][0], out: d[t][1] };
}

const LORA_KEYS = ["rank", "alpha", "targets", "useRslora", "rankPattern", "alphaPattern"];
const isRank = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 256;

/** A checked LoraConfig in one canonical form (targets in webart's order; empty patterns and rsLoRA off left out),
 *  so two configs meaning the same compare equal as JSON. */
export function validateLoraConfig(l: Partial<LoraConfig>): LoraConfig {
  for (const k of Object.keys(l)) if (!LORA_KEYS.includes(k)) throw new Error(`lora: unknown key "${k}"`);
  const out = { ...DEFAULT_LORA, ...l };
  if (!isRank(out.rank)) throw new Error(`lora.rank: ${out.rank} must be an integer in [1, 256]`);
  if (!(typeof out.alpha === "number" && out.alpha > 0)) throw new Error(`lora.alpha: ${out.alpha} must be > 0`);
  if (!Array.isArray(out.targets)) throw new Error(`lora.targets: ${JSON.stringify(out.targets)} must be a list`);
  for (const t of out.targets) {
    if (!LORA_TARGETS.includes(t)) throw new Error(`lora.targets: "${t}" is not one of ${LORA_TARGETS.join(", ")}`);
  }
  if (!out.targets.length) throw new Error("lora.targets: at least one target");
  if (out.useRslora !== undefined && typeof out.useRslora !== "boolean")
    throw new Error(`lora.useRslora: ${JSON.stringify(out.useRslora)} must be true or false`);
  const pattern = (field: "rankPattern" | "alphaPattern") => {
    const p = out[field];
    if (p === undefined) return undefined;
    if (typeof p !== "object" || p === null || Array.isArray(p))
      throw new Error(`lora.${field}: ${JSON.stringify(p)} must be an object of module pattern to value`);
    for (const [k, v] of Object.entries(p)) {
      try {
        new RegExp(k);
      } catch {
        throw new Error(`lora.${field}: key ${JSON.stringify(k)} is not a valid regular expression`);
      }
      if (field === "rankPattern" ? !isRank(v) : !(typeof v === "number" && v > 0))
        throw new Error(
          `lora.${field}: ${JSON.stringify(k)}: ${JSON.stringify(v)} must be ${field === "rankPattern" ? "an integer in [1, 256]" : "> 0"}`,
        );
    }
    return Object.keys(p).length ? { ...p } : undefined;
  };
  const rankPattern = pattern("rankPattern");
  const alphaPattern = pattern("alphaPattern");
  return {
    rank: out.rank,
    alpha: out.alpha,
    targets: LORA_TARGETS.filter((t) => out.targets.includes(t)),
    ...(out.useRslora ? { useRslora: true } : {}),
    ...(rankPattern ? { rankPattern } : {}),
    ...(alphaPattern ? { alphaPattern } : {}),
  };
}

/** The largest rank of any module (what buffers sized per rank must hold). */
export function maxLoraRank(c: LoraConfig): number {
  return Math.max(c.rank, ...Object.values(c.rankPattern ?? {}));
}

export class LoraState {
  readonly entries: LoraEntry[] = [];
  readonly byLayer: Map<LoraTarget, LoraEntry>[] = [];
  readonly size: number;
  params: GPUBuffer;
  grads?: GPUBuffer;
  m?: GPUBuffer;
  v?: GPUBuffer;
  /** Whether inference applies the adapter (off = the base model, for reference logprobs). */
  enabled = true;
  /** Counts the changes of `params` (initialize, load, write, the optimizer step): weights the adapter was merged
   *  into (Model.mergeLora) are made again when it moves. Code that changes params another way bumps it. */
  version = 0;
  /** AdamW updates applied to `params` (the t of its bias correction): saved with the optimizer state, counted by
   *  whoever runs the optimizer (art/train-step.ts). */
  updates = 0;

  constructor(
    private gpu: Gpu,
    readonly model: ModelConfig,
    readonly config: LoraConfig,
  ) {
    let off = 0;
    for (let l = 0; l < model.numLayers; l++) {
      const map = new Map<LoraTarget, LoraEntry>();
      for (const t of config.targets) {
        const d = loraDims(model, t);
        const { rank, scale } = moduleLora(config, l, t);
        const e = { layer: l, target: t, ...d, rank, scale, a: off, b: off + rank * d.in };
        off += rank * (d.in + d.out);
        this.entries.push(e);
        map.set(t, e);
      }
      this.byLayer.push(map);
    }
    this.size = off;
    this.params = gpu.buffer(off * 4, "lora", "lora params");
  }

  /** PEFT's initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a=sqrt(5)), B = 0. */
  initialize(seed: number): void {
    const rng = new Rng(seed);
    const w = new Float32Array(this.size);
    for (const e of this.entries) {
      const bound = 1 / Math.sqrt(e.in);
      for (let i = 0; i < e.rank * e.in; i++) w[e.a + i] = rng.uniform(-bound, bound);
    }
    this.write(w);
  }

  /** Sets every value of the adapter (its flat layout, `size` of them). */
  write(values: Float32Array): void {
    if (values.length !== this.size) throw new Error(`LoraState.write: ${values.length} values for ${this.size}`);
    this.gpu.write(this.params, values);
    this.version++;
  }

  slot(layer: number, t: LoraTarget, buf: GPUBuffer = this.params): LoraSlot | undefined {
    const e = this.byLayer[layer].get(t);
    return e ? { buffer: buf, a: e.a, b: e.b } : undefined;
  }

  ensureOptimizer(): void {
    if (this.grads) return;
    const z = new Float32Array(this.size);
    this.grads = this.gpu.upload(z, "optimizer", "lora grads");
    this.m = this.gpu.upload(z, "optimizer", "adam m");
    this.v = this.gpu.upload(z, "optimizer", "adam v");
  }

  static peftName(layer: number, t: LoraTarget, ab: "A" | "B"): string {
    return `base_model.model.${layerModule(layer, PROJECTIONS[t])}.lora_${ab}.weight`;
  }

  /** adapter_model.safetensors bytes, in PEFT's names: lora_A (R, in), lora_B (out, R). */
  async toSafetensors(): Promise<Uint8Array> {
    const w = await this.gpu.readF32(this.params, this.size);
    const tensors = this.entries.flatMap((e) => [
      {
        name: LoraState.peftName(e.layer, e.target, "A"),
        dtype: "F32" as const,
        shape: [e.rank, e.in],
        data: w.slice(e.a, e.a + e.rank * e.in),
      },
      {
        name: LoraState.peftName(e.layer, e.target, "B"),
        dtype: "F32" as const,
        shape: [e.out, e.rank],
        data: w.slice(e.b, e.b + e.rank * e.out),
      },
    ]);
    return writeSafetensors(tensors, { format: "pt" });
  }

  /** adapter_config.json for these weights (model/peft.ts). */
  adapterConfig(baseModel: string): Record<string, unknown> {
    return writeAdapterConfig(this.config, baseModel);
  }

  /** Loads a PEFT adapter (any float dtype); every expected tensor must be there with its shape. */
  async load(reader: WeightReader): Promise<void> {
    const w = new Float32Array(this.size);
    for (const e of this.entries) {
      const R = e.rank;
      for (const [ab, off, shape] of [
        ["A", e.a, [R, e.in]],
        ["B", e.b, [e.out, R]],
      ] as const) {
        const name = LoraState.peftName(e.layer, e.target, ab);
        const info = reader.tensorsInfo.get(name);
        if (!info)
          throw new Error(
            `${reader.name}: tensor ${name} is missing (rank ${R}, targets ${this.config.targets.join(",")})`,
          );
        if (info.shape.join(",") !== shape.join(",")) {
          const why = this.config.rankPattern ? " (rank from r and rank_pattern)" : "";
          throw new Error(`${reader.name}: tensor ${name} has shape [${info.shape}], expected [${shape}]${why}`);
        }
        const t = await reader.read(name);
        w.set(tensorToF32({ dtype: t.dtype, bytes: t.bytes }), off);
      }
    }
    this.write(w);
  }

  dispose(): void {
    this.gpu.release(this.params, this.grads, this.m, this.v);
  }
}
