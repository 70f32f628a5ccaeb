// `webart pretrain --trainer torch`: the same SFT phases run by PyTorch on the CPU (python/torch_sft.py) instead of
// the engine. The sequences are the engine's own (Sft.toSequences: the chat template's ids, 1 on the assistant
// tokens), written to a binary file; the Python side trains the model folder in place with the engine's recipe
// (masked loss, AdamW, clipping, warm-up and cosine) and writes model.safetensors in HF names. On 2 CPU cores it
// runs ~50x faster than the engine on SwiftShader, which is what long pretraining (the email model) needs; the
// engine then loads and measures the result as usual.
import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { SftSequence } from "@webart/engine";

/** Writes sequences for torch_sft.py: u32 count, u32 lengths, every sequence's u16 ids, every sequence's u8 mask. */
export function writeSequences(path: string, seqs: SftSequence[]): void {
  const total = seqs.reduce((s, q) => s + q.ids.length, 0);
  const buf = Buffer.alloc(4 + 4 * seqs.length + 3 * total);
  let o = buf.writeUInt32LE(seqs.length, 0);
  for (const q of seqs) o = buf.writeUInt32LE(q.ids.length, o);
  for (const q of seqs)
    for (let i = 0; i < q.ids.length; i++) {
      if (q.ids[i] > 0xffff) throw new Error(`writeSequences: token id ${q.ids[i]} does not fit the file's 16 bits`);
      o = buf.writeUInt16LE(q.ids[i], o);
    }
  for (const q of seqs) for (let i = 0; i < q.mask.length; i++) buf[o++] = q.mask[i] > 0 ? 1 : 0;
  writeFileSync(path, buf);
}

/** python/torch_sft.py of this package (found from this module, in src/ or in the dist bundle). */
export function torchScript(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++, dir = dirname(dir)) {
    const p = join(dir, "python", "torch_sft.py");
    if (existsSync(p)) return p;
  }
  throw new Error("webart pretrain --trainer torch: python/torch_sft.py is missing from the webart package");
}

export interface TorchPhase {
  /** The model folder: trained in place from its model.safetensors (its config and tokenizer stay). */
  dir: string;
  data: string;
  val: string;
  /** Where the script writes its steps, minutes and last validation (JSON). */
  report: string;
  minutes: number;
  batch: number;
  lr: number;
  seed: number;
  warmup: number;
}

/** Runs one phase in python3 (its lines go to `log`); rejects with what to install when torch is missing. */
export function runTorchPhase(p: TorchPhase, log: (m: string) => void): Promise<void> {
  const args = [
    torchScript(),
    ...["--model", p.dir, "--out", p.dir, "--data", p.data, "--val", p.val, "--report", p.report, "--init"],
    ...["--minutes", String(p.minutes), "--batch", String(p.batch), "--lr", String(p.lr)],
    ...["--seed", String(p.seed), "--warmup", String(p.warmup)],
  ];
  const python = process.env.PYTHON ?? "python3";
  return new Promise((resolve, reject) => {
    const child = spawn(python, args, { stdio: ["ignore", "pipe", "pipe"] });
    let err = "";
    let pending = "";
    child.stdout.on("data", (b: Buffer) => {
      const lines = (pending + b.toString()).split("\n");
      pending = lines.pop()!;
      for (const l of lines) if (l) log(`torch: ${l}`);
    });
    child.stderr.on("data", (b: Buffer) => (err += b.toString()));
    child.on("error", (e) =>
      reject(new Error(`--trainer torch: could not run ${python} (${e.message}); install Python 3 or set PYTHON`)),
    );
    child.on("close", (code) => {
      if (pending) log(`torch: ${pending}`);
      if (code === 0) return resolve();
      const hint = /No module named 'torch'/.test(err)
        ? " (PyTorch is not installed: pip install torch, or apt-get install python3-torch; or use --trainer engine)"
        : "";
      reject(new Error(`--trainer torch: ${python} torch_sft.py exited with ${code}${hint}:\n${err.slice(-2000)}`));
    });
  });
}
