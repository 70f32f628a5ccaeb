// A run's files (ART's layout): model.json, history.jsonl, trajectories/{split}/{step}.jsonl and
// checkpoints/{step}/ with the PEFT adapter plus optimizer.safetensors for exact resume. A checkpoint is
// written completely before the `latest` pointer names it.
import { dec, runPrefix, type RunStore } from "../store/store.ts";
import { memorySource, WeightReader, writeSafetensors, tensorToF32 } from "../weights/index.ts";

export const stepDir = (step: number) => String(step).padStart(4, "0");

export interface CheckpointFiles {
  adapterConfig: Record<string, unknown>;
  adapter: Uint8Array;
  /** m, v and the trainer state (step, rng) for exact resume. */
  optimizer: Uint8Array;
}

export class RunFiles {
  readonly prefix: string;
  constructor(
    readonly store: RunStore,
    project: string,
    name: string,
  ) {
    this.prefix = runPrefix(project, name);
  }

  path(p: string): string {
    return `${this.prefix}/${p}`;
  }

  async readJson<T>(p: string): Promise<T | null> {
    const b = await this.store.read(this.path(p));
    return b ? (JSON.parse(dec(b)) as T) : null;
  }

  async writeJson(p: string, v: unknown): Promise<void> {
    await this.store.write(this.path(p), JSON.stringify(v, null, 2) + "\n");
  }

  /** The latest complete checkpoint step, or null. */
  async latestStep(): Promise<number | null> {
    const b = await this.store.read(this.path("latest"));
    if (!b) return null;
    const n = Number(dec(b).trim());
    return Number.isInteger(n) && n >= 0 ? n : null;
  }

  async listCheckpoints(): Promise<number[]> {
    const files = await this.store.list(this.path("checkpoints"));
    const latest = await this.latestStep();
    const steps = new Set<number>();
    for (const f of files) {
      const m = /checkpoints\/(\d+)\/adapter_model\.safetensors$/.exec(f);
      // Steps above the pointer are leftovers of an interrupted write.
      if (m && latest !== null && Number(m[1]) <= latest) steps.add(Number(m[1]));
    }
    return [...steps].sort((a, b) => a - b);
  }

  async writeCheckpoint(step: number, c: CheckpointFiles): Promise<void> {
    const d = `checkpoints/${stepDir(step)}`;
    await this.store.writeAtomic(
      {
        [this.path(`${d}/adapter_config.json`)]: JSON.stringify(c.adapterConfig, null, 2) + "\n",
        [this.path(`${d}/adapter_model.safetensors`)]: c.adapter,
        [this.path(`${d}/optimizer.safetensors`)]: c.optimizer,
      },
      this.path("latest"),
      String(step),
    );
  }

  async readCheckpoint(
    step: number,
  ): Promise<{ adapter: WeightReader; optimizer: WeightReader | null; adapterConfig: Record<string, unknown> }> {
    const d = `checkpoints/${stepDir(step)}`;
    const a = await this.store.read(this.path(`${d}/adapter_model.safetensors`));
    if (!a) throw new Error(`${this.path(d)}: adapter_model.safetensors is missing`);
    const o = await this.store.read(this.path(`${d}/optimizer.safetensors`));
    const cfg = (await this.readJson<Record<string, unknown>>(`${d}/adapter_config.json`)) ?? {};
    return {
      adapter: await WeightReader.fromSource(memorySource(a, `${this.path(d)}/adapter_model.safetensors`)),
      optimizer: o ? await WeightReader.fromSource(memorySource(o, `${this.path(d)}/optimizer.safetensors`)) : null,
      adapterConfig: cfg,
    };
  }

  async deleteCheckpoint(step: number): Promise<void> {
    await this.store.remove(this.path(`checkpoints/${stepDir(step)}`));
  }

  async appendHistory(row: Record<string, unknown>): Promise<void> {
    await this.store.append(this.path("history.jsonl"), JSON.stringify(row) + "\n");
  }

  async history(): Promise<Record<string, unknown>[]> {
    const b = await this.store.read(this.path("history.jsonl"));
    if (!b) return [];
    return dec(b)
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  }

  async writeTrajectories(split: string, step: number, groups: { toJSON(): unknown }[]): Promise<void> {
    const text = groups.map((g) => JSON.stringify(g)).join("\n") + "\n";
    await this.store.write(this.path(`trajectories/${split}/${stepDir(step)}.jsonl`), text);
  }
}

/** optimizer.safetensors: AdamW moments (f32, flat like the LoRA buffer) and the trainer's state in metadata. */
export function packOptimizer(m: Float32Array, v: Float32Array, state: Record<string, string>): Uint8Array {
  return writeSafetensors(
    [
      { name: "adam.m", dtype: "F32", shape: [m.length], data: m },
      { name: "adam.v", dtype: "F32", shape: [v.length], data: v },
    ],
    state,
  );
}

export async function unpackOptimizer(
  r: WeightReader,
): Promise<{ m: Float32Array; v: Float32Array; state: Record<string, unknown> }> {
  const m = await r.read("adam.m");
  const v = await r.read("adam.v");
  return { m: tensorToF32(m), v: tensorToF32(v), state: r.metadata };
}
