// `--trainer torch` must train as the engine trains: the same sequences (written by writeSequences), the same
// starting weights and the same three AdamW steps give the same weights in python/torch_sft.py and in the engine's
// FullTrainer. Skipped, saying why, when python3 has no torch (set WEBART_PYTHON to one that has it).
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Engine, FullTrainer, Rng, type SftSequence } from "@webart/engine";
import { SFT_ADAMW } from "./sft.ts";
import { torchScript, writeSequences } from "./torch.ts";

const PYTHON = process.env.WEBART_PYTHON ?? "python3";
const probe = spawnSync(PYTHON, ["-c", "import torch, numpy"], { encoding: "utf8" });
const missing = probe.status === 0 ? null : `${PYTHON} cannot import torch and numpy`;
if (missing) console.log(`torch.test.ts skipped: ${missing} (set WEBART_PYTHON to an interpreter that has them)`);

/** The F32 tensors of a safetensors file by name. */
function readF32(path: string): Map<string, Float32Array> {
  const b = readFileSync(path);
  const n = Number(b.readBigUInt64LE(0));
  const header = JSON.parse(b.subarray(8, 8 + n).toString()) as Record<
    string,
    { dtype: string; data_offsets: number[] }
  >;
  const out = new Map<string, Float32Array>();
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    expect(t.dtype).toBe("F32");
    const [a, e] = t.data_offsets;
    out.set(name, new Float32Array(b.buffer.slice(b.byteOffset + 8 + n + a, b.byteOffset + 8 + n + e)));
  }
  return out;
}

const MODEL = join(import.meta.dirname, "../../../../../models/webart-tiny");
const dir = mkdtempSync(join(tmpdir(), "webart-torch-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(missing !== null)("torch_sft.py against the engine's FullTrainer", () => {
  it("three AdamW steps on the same sequences give the same weights", async () => {
    cpSync(MODEL, join(dir, "m"), { recursive: true });
    const rng = new Rng(3);
    const seqs: SftSequence[] = [40, 25, 60, 33].map((T) => ({
      ids: Array.from({ length: T }, () => rng.int(400)),
      mask: Array.from({ length: T }, (_, t) => (t >= 10 && t % 3 !== 0 ? 1 : 0)),
    }));
    writeSequences(join(dir, "seqs.bin"), seqs);
    const hp = { lr: 2e-3, warmup: 1, steps: 3 };
    const r = spawnSync(
      PYTHON,
      [
        torchScript(),
        ...["--model", join(dir, "m"), "--out", join(dir, "t"), "--init", "--data", join(dir, "seqs.bin")],
        ...["--val", join(dir, "seqs.bin"), "--batch", "4", "--lr", String(hp.lr), "--warmup", String(hp.warmup)],
        ...["--steps", String(hp.steps)],
      ],
      { encoding: "utf8" },
    );
    expect(r.status, r.stderr).toBe(0);

    const engine = await Engine.load(join(dir, "m"), { weightsF32: true, kvSlots: 4, maxContext: 128, name: "m" });
    const tr = new FullTrainer(engine.model);
    const w0 = await tr.readWeights();
    for (let step = 1; step <= hp.steps; step++) {
      // torch_sft.py's schedule with --steps: warm-up, then cosine from 1 to 0.1 over the steps.
      const frac = (step - 1) / hp.steps;
      const lr = hp.lr * Math.min(1, step / hp.warmup) * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * frac)));
      await tr.step_(seqs, { lr, ...SFT_ADAMW });
    }
    const w1 = await tr.readWeights();
    await engine.close();
    const torch = readF32(join(dir, "t/model.safetensors"));
    tr.tensors.forEach((t, i) => {
      const wt = torch.get(t.name)!;
      let moved = 0;
      let diff = 0;
      for (let k = 0; k < t.n; k++) {
        moved += (w1[i][k] - w0[i][k]) ** 2;
        diff += (wt[k] - w1[i][k]) ** 2;
      }
      // Each weight moved by ~lr a step; the two updates agree to ~3e-5 of it (f32 sums in another order).
      expect(moved, t.name).toBeGreaterThan(0);
      expect(Math.sqrt(diff / moved), `${t.name}: |torch - engine| / |engine's update|`).toBeLessThan(1e-3);
    });
  }, 120_000);

  it("webart pretrain --trainer torch runs every phase in PyTorch and the engine measures each", () => {
    const out = join(dir, "cli");
    const r = spawnSync(
      process.execPath,
      [
        join(import.meta.dirname, "../../../bin/webart.js"),
        "pretrain",
        ...["--trainer", "torch", "--out", out, "--games", "40", "--eval-games", "2", "--seed", "3"],
        ...["--minutes", "0.03", "--skilled-minutes", "0.03", "--skill-minutes", "0.03"],
      ],
      { encoding: "utf8", env: { ...process.env, PYTHON } },
    );
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(readFileSync(join(out, "pretrain.json"), "utf8"));
    expect(report.trainer).toBe("torch");
    expect(report.phases.map((p: { name: string }) => p.name)).toEqual(["board", "skilled", "skills"]);
    for (const p of report.phases) {
      expect(p.steps, p.name).toBeGreaterThan(0);
      expect(p.last.legal, p.name).toBeGreaterThanOrEqual(0);
    }
    expect(r.stdout).toMatch(/skilled eval: [\d.]+% legal moves/);
  }, 300_000);
});
