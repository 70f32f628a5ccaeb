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

  it("--task email: a model with its own tokenizer and a 2048-token context, trained on tool-call transcripts", () => {
    const out = mkdtempSync(join(tmpdir(), "webart-pretrain-email-"));
    const args = ["--task", "email", "--out", out, "--episodes", "4", "--batch", "2", "--perfect", "0.5"];
    args.push("--first-minutes", "0.01", "--minutes", "0.01");
    const r = webart(["pretrain", ...args, "--eval-games", "2", "--seed", "5"]);
    expect(r.code, r.err).toBe(0);
    const report = JSON.parse(readFileSync(join(out, "pretrain.json"), "utf8"));
    expect(report).toMatchObject({
      task: "email",
      seed: 5,
      context: 2048,
      episodes: 4,
      perfect: 0.5,
      phases: [{ name: "first call" }, { name: "episodes" }],
    });
    // One sequence per episode: every turn's context extends the one before, as the template renders the calls.
    expect(report.phases.map((p: { sequences: number }) => p.sequences)).toEqual([4, 4]);
    const last = report.phases[1].last;
    expect(last.wellFormed).toBeGreaterThanOrEqual(0);
    expect(last.wellFormed).toBeLessThanOrEqual(1);
    expect(last.turns).toBeGreaterThanOrEqual(1);
    expect(last.fromQuestion).toBeGreaterThanOrEqual(0);
    expect(last.fromQuestion).toBeLessThanOrEqual(1);
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(config.max_position_embeddings).toBe(2048);
    expect(config.vocab_size).toBe(report.vocab);
    const tc = JSON.parse(readFileSync(join(out, "tokenizer_config.json"), "utf8"));
    expect(tc.model_max_length).toBe(2048);
    expect(tc.chat_template).toContain("tool_call");
    // The tools as signature lines (compactTools), not JSON Schema.
    expect(tc.chat_template).toContain("params.properties.items()");
    expect(r.out).toMatch(/first call eval: [\d.]+% well-formed tool calls/);
    expect(r.out).toMatch(/episodes eval: [\d.]+% well-formed tool calls .*; first searches from the question [\d.]+/);
    expect(webart(["pretrain", "--task", "chess", "--out", out, "--force"]).err).toContain(
      '--task "chess" is not known',
    );
  }, 300_000);
});
