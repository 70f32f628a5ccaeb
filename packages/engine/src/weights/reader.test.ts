// Loading tiny models from local folders and browser-style files: config + tokenizer files + weights, single
// and sharded, streamed tensor by tensor, and checked against the config (missing/extra/wrong-shape tensors).
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Family } from "../config/index.ts";
import {
  blobFiles,
  directoryHandleFiles,
  openModel,
  WeightsError,
  writeSafetensors,
  type DirectoryHandleLike,
  type LoadProgress,
  type OpenedModel,
  type Tensor,
  type TensorData,
} from "./index.ts";
import { randomTensors, removeDir, tempDir, tinyConfigJson, writeModelDir } from "./testing.ts";

let root: string;
beforeAll(async () => void (root = await tempDir()));
afterAll(() => removeDir(root));

const bytesOf = (t: TensorData) => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);

/** Streams every tensor, checking each owns its buffer, and returns them with the progress reports. */
async function drain(model: OpenedModel): Promise<{ tensors: Tensor[]; progress: LoadProgress[] }> {
  const tensors: Tensor[] = [];
  const progress: LoadProgress[] = [];
  for await (const t of model.tensors((p) => progress.push(p))) {
    expect(t.bytes.byteOffset).toBe(0);
    expect(t.bytes.buffer.byteLength).toBe(t.bytes.byteLength); // no view into a whole-file buffer
    tensors.push(t);
  }
  return { tensors, progress };
}

function expectSameTensors(got: Tensor[], want: TensorData[]): void {
  expect(got.map((t) => t.name).sort()).toEqual(want.map((t) => t.name).sort());
  const byName = new Map(want.map((t) => [t.name, t]));
  for (const t of got) {
    const w = byName.get(t.name)!;
    expect([t.dtype, t.shape]).toEqual([w.dtype, w.shape]);
    expect(t.bytes).toEqual(bytesOf(w));
  }
}

describe("openModel on a folder", () => {
  it.each<[Family, "F32" | "BF16" | "F16", number]>([
    ["qwen3", "BF16", 1],
    ["qwen2", "F32", 1],
    ["llama", "F16", 3],
  ])("loads a tiny %s model (%s, %i shard(s)) and streams every tensor", async (family, dtype, shards) => {
    const dir = join(root, `${family}-${shards}`);
    const config = tinyConfigJson(family);
    const tensors = randomTensors(config, dtype, shards);
    await writeModelDir(dir, config, tensors, { shards, files: { "chat_template.jinja": "{{ 'x' }}" } });
    const model = await openModel(dir);
    try {
      expect(model.config.family).toBe(family);
      expect(model.tokenizerConfig.eos_token).toBe("b");
      expect(model.chatTemplate).toBe("{{ 'x' }}");
      expect(model.generationConfig).toBe(null);
      expect(model.weights.name).toBe(shards > 1 ? "model.safetensors.index.json" : "model.safetensors");
      const { tensors: got, progress } = await drain(model);
      expectSameTensors(got, tensors);
      const total = tensors.reduce((a, t) => a + t.data.byteLength, 0);
      expect(progress.map((p) => p.tensor)).toEqual(got.map((t) => t.name));
      expect(progress.at(-1)).toMatchObject({ bytesDone: total, bytesTotal: total });
      expect(progress.every((p, i) => i === 0 || p.bytesDone > progress[i - 1].bytesDone)).toBe(true);
    } finally {
      await model.close();
    }
  });

  it("skips a tied checkpoint's copy of lm_head instead of calling it unexpected", async () => {
    const dir = join(root, "tied");
    const config = tinyConfigJson("qwen3", { tie_word_embeddings: true });
    const untied = randomTensors({ ...config, tie_word_embeddings: false }, "BF16"); // includes lm_head.weight
    await writeModelDir(dir, config, untied);
    const model = await openModel({ path: dir });
    const { tensors } = await drain(model);
    await model.close();
    expect(tensors.some((t) => t.name === "lm_head.weight")).toBe(false);
    expect(tensors.length).toBe(untied.length - 1);
  });
});

describe("checkpoint checks", () => {
  const config = tinyConfigJson("qwen2");
  const fails = async (name: string, tensors: TensorData[], shards = 1) => {
    const dir = join(root, name);
    await writeModelDir(dir, config, tensors, { shards });
    const err = await openModel(dir).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WeightsError);
    return (err as Error).message;
  };

  it("names a missing tensor and its expected shape", async () => {
    const tensors = randomTensors(config, "BF16").filter((t) => t.name !== "model.layers.1.self_attn.k_proj.bias");
    expect(await fails("missing", tensors)).toBe(
      'model.safetensors: tensor "model.layers.1.self_attn.k_proj.bias" is missing (expected shape [4])',
    );
  });

  it("names an unexpected tensor and the shard holding it", async () => {
    const tensors = [
      ...randomTensors(config, "BF16"),
      { name: "model.layers.0.mlp.extra.weight", dtype: "F32" as const, shape: [2], data: new Float32Array(2) },
    ];
    expect(await fails("extra", tensors, 2)).toMatch(
      /^model-00002-of-00002\.safetensors: tensor "model\.layers\.0\.mlp\.extra\.weight" is not expected by the config/,
    );
  });

  it("names a tensor whose shape disagrees with the config", async () => {
    const tensors = randomTensors(config, "BF16").map((t) =>
      t.name === "model.layers.0.mlp.down_proj.weight" ? { ...t, shape: [t.shape[1], t.shape[0]] } : t,
    );
    expect(await fails("shape", tensors)).toBe(
      'model.safetensors: tensor "model.layers.0.mlp.down_proj.weight" has shape [12, 8], but the config implies [8, 12]',
    );
  });

  it("checks the shard index against the shards", async () => {
    const dir = join(root, "index");
    const tensors = randomTensors(config, "BF16");
    await writeModelDir(dir, config, tensors, { shards: 2 });
    const index = JSON.parse(await readFile(join(dir, "model.safetensors.index.json"), "utf8"));
    const message = async () => (await openModel(dir).catch((e: Error) => e)) as Error;

    index.weight_map["model.norm.weight"] = "model-00001-of-00002.safetensors"; // it lives in shard 2
    await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify(index));
    expect((await message()).message).toBe(
      'model-00002-of-00002.safetensors: tensor "model.norm.weight" is listed in model.safetensors.index.json under model-00001-of-00002.safetensors',
    );

    index.weight_map["model.norm.weight"] = "model-00002-of-00002.safetensors";
    index.weight_map["ghost.weight"] = "model-00002-of-00002.safetensors";
    await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify(index));
    expect((await message()).message).toBe(
      'model-00002-of-00002.safetensors: tensor "ghost.weight" is listed in model.safetensors.index.json but missing from the shard',
    );

    delete index.weight_map["ghost.weight"];
    await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify(index));
    await rm(join(dir, "model-00002-of-00002.safetensors"));
    expect((await message()).message).toMatch(
      /weight_map names shard model-00002-of-00002\.safetensors, which is not in /,
    );
  });

  it("says what is wrong when there are no weights or no config", async () => {
    const dir = join(root, "noweights");
    await writeModelDir(dir, config, randomTensors(config, "BF16"));
    await rm(join(dir, "model.safetensors"));
    await expect(openModel(dir)).rejects.toThrow(/has neither model\.safetensors nor model\.safetensors\.index\.json/);
    await rm(join(dir, "config.json"));
    await expect(openModel(dir)).rejects.toThrow(/no config\.json/);
    await writeModelDir(dir, { ...config, hidden_act: "relu" }, []);
    await expect(openModel(dir)).rejects.toThrow(
      `${dir}/config.json: hidden_act "relu" is not supported (supported: silu)`,
    );
  });
});

describe("browser-style sources", () => {
  const config = tinyConfigJson("llama");
  const tensors = randomTensors(config, "BF16", 5);
  const fileMap = () => {
    const enc = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));
    return new Map<string, Uint8Array<ArrayBuffer>>([
      ["config.json", enc(config)],
      ["tokenizer.json", enc({ model: { type: "BPE", vocab: {}, merges: [] } })],
      ["model.safetensors", writeSafetensors(tensors)],
    ]);
  };

  it("reads a webkitdirectory-style list of Files by their relative paths", async () => {
    const files = [...fileMap()].map(([name, bytes]) => {
      const f = new File([bytes], name);
      Object.defineProperty(f, "webkitRelativePath", { value: `my-model/${name}` });
      return f;
    });
    const model = await openModel(files);
    expect(model.tokenizerConfig).toEqual({});
    expectSameTensors((await drain(model)).tensors, tensors);
  });

  it("reads a File System Access directory handle lazily, file by file", async () => {
    const opened: string[] = [];
    const entries = fileMap();
    const notFound = () => Object.assign(new Error("not found"), { name: "NotFoundError" });
    const handle: DirectoryHandleLike = {
      name: "my-model",
      getDirectoryHandle: async () => Promise.reject(notFound()),
      getFileHandle: async (name) => {
        const bytes = entries.get(name);
        if (!bytes) throw notFound();
        return { getFile: async () => (opened.push(name), new File([bytes], name)) };
      },
    };
    const model = await openModel(handle);
    expectSameTensors((await drain(model)).tensors, tensors);
    expect(opened).toEqual(["config.json", "tokenizer.json", "model.safetensors"]);
    expect(await directoryHandleFiles(handle).open("sub/x.json")).toBe(null);
    expect(await blobFiles([]).open("config.json")).toBe(null);
  });
});
