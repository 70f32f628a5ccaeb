// Test helpers (Node only): tiny model folders written to disk, and a 127.0.0.1 HTTP server over a folder with
// optional Range support and a log of requests, standing in for static hosts and the Hugging Face Hub.

import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Rng, toBf16, toF16 } from "@webart/gpu";
import { tensorShapes, type Family } from "../config/index.ts";
import { parseConfig } from "../config/config.ts";
import { writeSafetensors, type Dtype, type TensorData } from "./safetensors.ts";

export const tempDir = (prefix = "webart-weights-") => mkdtemp(join(tmpdir(), prefix));
export const removeDir = (dir: string) => rm(dir, { recursive: true, force: true });

/** config.json of a tiny model of a family: C=8, F=12, H=2, KV=1, D=4 (6 for Qwen3 and Gemma 3, so H*D != C),
 * L=2, V=16. */
export function tinyConfigJson(family: Family, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const arch = {
    llama: "LlamaForCausalLM",
    mistral: "MistralForCausalLM",
    qwen2: "Qwen2ForCausalLM",
    qwen3: "Qwen3ForCausalLM",
    gemma3: "Gemma3ForCausalLM",
  }[family];
  return {
    architectures: [arch],
    model_type: family === "gemma3" ? "gemma3_text" : family,
    hidden_size: 8,
    intermediate_size: 12,
    num_hidden_layers: 2,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    ...(family === "qwen3" || family === "gemma3" ? { head_dim: 6 } : {}),
    ...(family === "gemma3" ? { sliding_window: 4, layer_types: ["sliding_attention", "full_attention"] } : {}),
    vocab_size: 16,
    max_position_embeddings: 64,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: false,
    torch_dtype: "bfloat16",
    eos_token_id: 2,
    ...extra,
  };
}

/** Seeded random tensors for every weight the config implies, stored as `dtype`. */
export function randomTensors(configJson: Record<string, unknown>, dtype: Dtype, seed = 1): TensorData[] {
  const rng = new Rng(seed);
  const out: TensorData[] = [];
  for (const [name, shape] of tensorShapes(parseConfig(configJson))) {
    const n = shape.reduce((a, b) => a * b, 1);
    const f = Float32Array.from({ length: n }, () => rng.next() * 2 - 1);
    const data = dtype === "F32" ? f : Uint16Array.from(f, dtype === "BF16" ? toBf16 : toF16);
    out.push({ name, dtype, shape, data });
  }
  return out;
}

/** Writes a model folder: config.json, a small tokenizer.json, and the tensors in one file or `shards` shards. */
export async function writeModelDir(
  dir: string,
  configJson: Record<string, unknown>,
  tensors: TensorData[],
  opts: { shards?: number; files?: Record<string, string | Uint8Array> } = {},
): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "config.json"), JSON.stringify(configJson, null, 2));
  const tokenizer = { version: "1.0", added_tokens: [], model: { type: "BPE", vocab: { a: 0, b: 1 }, merges: [] } };
  await writeFile(join(dir, "tokenizer.json"), JSON.stringify(tokenizer));
  await writeFile(
    join(dir, "tokenizer_config.json"),
    JSON.stringify({ eos_token: "b", chat_template: "{{ messages[0].content }}" }),
  );
  const shards = opts.shards ?? 1;
  if (shards === 1) await writeFile(join(dir, "model.safetensors"), writeSafetensors(tensors, { format: "pt" }));
  else {
    const weightMap: Record<string, string> = {};
    const per = Math.ceil(tensors.length / shards);
    for (let s = 0; s < shards; s++) {
      const file = `model-${String(s + 1).padStart(5, "0")}-of-${String(shards).padStart(5, "0")}.safetensors`;
      const part = tensors.slice(s * per, (s + 1) * per);
      for (const t of part) weightMap[t.name] = file;
      await writeFile(join(dir, file), writeSafetensors(part, { format: "pt" }));
    }
    const total = tensors.reduce((a, t) => a + t.data.byteLength, 0);
    await writeFile(
      join(dir, "model.safetensors.index.json"),
      JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }),
    );
  }
  for (const [name, content] of Object.entries(opts.files ?? {})) await writeFile(join(dir, name), content);
}

export interface TestServer {
  url: string;
  /** Request paths with their Range header, in arrival order. */
  hits: { path: string; range: string | undefined; auth: string | undefined }[];
  close(): Promise<void>;
}

/**
 * Serves `root` on 127.0.0.1: GET path → file. With `range`, honors "Range: bytes=a-b" (206/416) as static
 * hosts and the hub do; without, always answers 200 with the whole file, like `python -m http.server`.
 * `mapPath` turns a request path into a path under `root` (null: 404), e.g. to emulate hub resolve URLs.
 */
export async function serveDir(
  root: string,
  opts: { range: boolean; mapPath?: (path: string) => string | null },
): Promise<TestServer> {
  const hits: TestServer["hits"] = [];
  const server = createServer(async (req: IncomingMessage, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    hits.push({ path, range: req.headers.range, auth: req.headers.authorization });
    const rel = opts.mapPath ? opts.mapPath(path) : path;
    const file = rel === null ? null : join(root, rel);
    const st = file ? await stat(file).catch(() => null) : null;
    if (!file || !st?.isFile()) {
      res.writeHead(404).end("not found");
      return;
    }
    const body = await readFile(file);
    const m = opts.range ? /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "") : null;
    if (!m) {
      res.writeHead(200, { "content-length": body.byteLength }).end(body);
      return;
    }
    const start = Number(m[1]);
    const end = Math.min(m[2] ? Number(m[2]) : body.byteLength - 1, body.byteLength - 1);
    if (start >= body.byteLength) {
      res.writeHead(416, { "content-range": `bytes */${body.byteLength}` }).end();
      return;
    }
    res
      .writeHead(206, {
        "content-range": `bytes ${start}-${end}/${body.byteLength}`,
        "content-length": end - start + 1,
      })
      .end(body.subarray(start, end + 1));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
