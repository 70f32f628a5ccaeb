// `webart pretrain` through the built bin, cut to a few seconds of training: it refuses a folder that already
// holds files, and with --force writes a complete model folder (HF layout) and its pretrain.json, keeping other files.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../../../../..");
const webart = (args: string[]) => {
  const r = spawnSync(process.execPath, ["packages/webart/bin/webart.js", ...args], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 300_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

describe("webart pretrain", () => {
  it("never writes into a folder that holds files without --force; with it, writes the model and keeps the rest", () => {
    const out = mkdtempSync(join(tmpdir(), "webart-pretrain-"));
    writeFileSync(join(out, "notes.txt"), "mine");
    const tiny = [
      "--out",
      out,
      "--games",
      "40",
      "--minutes",
      "0.01",
      "--skill-minutes",
      "0",
      "--eval-games",
      "2",
      "--seed",
      "3",
    ];
    const refused = webart(["pretrain", ...tiny]);
    expect(refused.code).toBe(2);
    expect(refused.err).toContain(`--out ${out} already holds files (notes.txt): pass --force`);
    expect(readdirSync(out)).toEqual(["notes.txt"]);

    const r = webart(["pretrain", ...tiny, "--force"]);
    expect(r.code, r.err).toBe(0);
    const files = [
      "config.json",
      "generation_config.json",
      "model.safetensors",
      "notes.txt",
      "pretrain.json",
      "tokenizer.json",
      "tokenizer_config.json",
    ];
    expect(readdirSync(out).sort()).toEqual(files);
    expect(readFileSync(join(out, "notes.txt"), "utf8")).toBe("mine");
    const report = JSON.parse(readFileSync(join(out, "pretrain.json"), "utf8"));
    expect(report).toMatchObject({ seed: 3, init_from: null, phases: [{ name: "board" }] });
    expect(report.phases).toHaveLength(1);
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(report.vocab).toBe(config.vocab_size);
    // f32 weights of every tensor: 4 bytes a parameter, plus the safetensors header.
    expect(statSync(join(out, "model.safetensors")).size).toBeGreaterThan(4 * report.parameters);
    expect(r.out).toMatch(/\[pretrain [\d.]+m\] board eval: /);
  }, 300_000);
});
