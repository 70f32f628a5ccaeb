// Models over HTTP, against a node:http server on 127.0.0.1: a static host with and without Range support, and
// a stand-in for the Hugging Face Hub (resolve URLs) to test the download cache by counting server hits.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  browserHubCache,
  hubFiles,
  nodeHubCache,
  openModel,
  parseRepoId,
  SourceError,
  urlSource,
  type CacheStorageLike,
  type OpenedModel,
  type Tensor,
  type TensorData,
} from "./index.ts";
import {
  randomTensors,
  removeDir,
  serveDir,
  tempDir,
  tinyConfigJson,
  writeModelDir,
  type TestServer,
} from "./testing.ts";

let root: string;
const config = tinyConfigJson("qwen3");
const tensors = randomTensors(config, "BF16", 11);
beforeAll(async () => {
  root = await tempDir();
  await writeModelDir(join(root, "single"), config, tensors);
  await writeModelDir(join(root, "sharded"), config, tensors, {
    shards: 2,
    files: { "generation_config.json": '{"eos_token_id": [1, 2]}' },
  });
});
afterAll(() => removeDir(root));

async function drain(model: OpenedModel): Promise<Tensor[]> {
  const out: Tensor[] = [];
  for await (const t of model.tensors()) out.push(t);
  await model.close();
  return out;
}

function expectSameTensors(got: Tensor[], want: TensorData[]): void {
  expect(got.length).toBe(want.length);
  const byName = new Map(want.map((t) => [t.name, t]));
  for (const t of got) {
    const w = byName.get(t.name)!;
    expect(t.bytes).toEqual(new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength));
  }
}

describe("URL source", () => {
  let server: TestServer;
  let plain: TestServer;
  beforeAll(async () => {
    server = await serveDir(root, { range: true });
    plain = await serveDir(root, { range: false });
  });
  afterAll(async () => {
    await server.close();
    await plain.close();
  });

  it("loads a sharded model with Range requests, small tensors fetched together", async () => {
    server.hits.length = 0;
    const model = await openModel(`${server.url}/sharded/`);
    expect(model.generationConfig).toEqual({ eos_token_id: [1, 2] });
    const headerHits = server.hits.length;
    expectSameTensors(await drain(model), tensors);
    const weightHits = server.hits.slice(headerHits);
    expect(weightHits.every((h) => h.range?.startsWith("bytes="))).toBe(true);
    expect(weightHits.length).toBeGreaterThan(0);
    expect(weightHits.length).toBeLessThan(tensors.length); // tiny tensors share requests
  });

  it("falls back to whole-file download when the server ignores Range, or refuses when asked to", async () => {
    const model = await openModel(`${plain.url}/single`);
    expectSameTensors(await drain(model), tensors);
    const err = await openModel(`${plain.url}/single`, { noRange: "error" }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(SourceError);
    expect((err as Error).message).toBe(
      `${plain.url}/single/config.json: the server ignores HTTP Range requests (answered 200 to a Range request); serve the model ` +
        'from a server that supports Range, or pass noRange: "buffer" to download whole files into memory',
    );
  });

  it("reads exact ranges and rejects reads past the end", async () => {
    const src = await urlSource(`${server.url}/single/model.safetensors`);
    const header = await src.read(0, 8);
    const len = Number(new DataView(header.buffer).getBigUint64(0, true));
    expect(new TextDecoder().decode(await src.read(8, 1))).toBe("{");
    expect((await src.read(8 + len, 16)).byteLength).toBe(16);
    await expect(src.read(src.size - 4, 8)).rejects.toThrow(/outside the file/);
    await expect(urlSource(`${server.url}/single/nope.json`)).rejects.toThrow(/not found/);
  });
});

describe("hub", () => {
  let hub: TestServer;
  // The stand-in serves {root}/{name}/{file} for /{org}/{name}/resolve/{main or v1}/{file}.
  beforeAll(async () => {
    hub = await serveDir(root, {
      range: true,
      mapPath: (p) => {
        const m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(p);
        return m && (m[3] === "main" || m[3] === "v1") ? `${m[2]}/${m[4]}` : null;
      },
    });
  });
  afterAll(() => hub.close());

  it("parses repo ids with revisions", () => {
    expect(parseRepoId("Qwen/Qwen3-0.6B")).toEqual({ repo: "Qwen/Qwen3-0.6B", revision: null });
    expect(parseRepoId("org/name@v1.2")).toEqual({ repo: "org/name", revision: "v1.2" });
    expect(() => parseRepoId("./models/x")).toThrow(/not a Hugging Face repo id/);
  });

  it("downloads into the Node cache once; the second load is served from the cache", async () => {
    const cacheDir = join(root, "cache");
    const opts = { endpoint: hub.url, cache: nodeHubCache(cacheDir), accessToken: "tok" };
    hub.hits.length = 0;
    const first = await openModel({ hub: "test-org/sharded@v1" }, opts);
    expect(first.files.name).toBe("test-org/sharded@v1");
    expectSameTensors(await drain(first), tensors);
    const paths = hub.hits.map((h) => h.path);
    expect(paths).toContain("/test-org/sharded/resolve/v1/config.json");
    expect(paths).toContain("/test-org/sharded/resolve/v1/model-00002-of-00002.safetensors");
    expect(hub.hits.every((h) => h.auth === "Bearer tok")).toBe(true);
    // Each file was fetched once, whole (no Range): the cache reads by range locally.
    expect(new Set(paths).size).toBe(paths.length);
    expect(hub.hits.every((h) => h.range === undefined)).toBe(true);

    hub.hits.length = 0;
    const second = await openModel("test-org/sharded@v1", opts);
    expectSameTensors(await drain(second), tensors);
    expect(hub.hits).toEqual([]); // files and misses (chat_template.jinja, ...) both cached

    const cached = await readdir(join(cacheDir, "test-org--sharded", "v1"));
    expect(cached).toContain("model-00001-of-00002.safetensors");
    expect(cached.some((f) => f.endsWith(".part"))).toBe(false);
  });

  it("reads by Range straight from the hub when the cache is off", async () => {
    hub.hits.length = 0;
    const model = await openModel("test-org/single", { endpoint: hub.url, cache: false });
    expectSameTensors(await drain(model), tensors);
    expect(hub.hits.filter((h) => h.path.endsWith("model.safetensors")).every((h) => h.range)).toBe(true);
  });

  it("reports a repo that does not exist", async () => {
    const cache = nodeHubCache(join(root, "cache"));
    await expect(openModel("test-org/absent", { endpoint: hub.url, cache })).rejects.toThrow(
      "test-org/absent@main: no config.json",
    );
  });

  it("caches in a CacheStorage (the browser's Cache API shape) the same way", async () => {
    const store = new Map<string, Response>();
    const storage: CacheStorageLike = {
      open: async () => ({
        match: async (url) => store.get(url)?.clone(),
        put: async (url, res) => void store.set(url, new Response(await res.arrayBuffer(), { headers: res.headers })),
      }),
    };
    const downloads: string[] = [];
    const opts = {
      endpoint: hub.url,
      cache: browserHubCache(storage),
      onDownload: (p: { file: string }) => downloads.push(p.file),
    };
    hub.hits.length = 0;
    expectSameTensors(await drain(await openModel({ hub: "test-org/single" }, opts)), tensors);
    const firstHits = hub.hits.length;
    expect(firstHits).toBeGreaterThan(0);
    expect(downloads).toContain("model.safetensors");
    expect(store.has(`${hub.url}/test-org/single/resolve/main/model.safetensors`)).toBe(true);
    expectSameTensors(await drain(await openModel({ hub: "test-org/single" }, opts)), tensors);
    expect(hub.hits.length).toBe(firstHits);
  });

  it("refuses file names that escape the repo", async () => {
    await expect(hubFiles("a/b", { endpoint: hub.url, cache: false }).open("../x")).rejects.toThrow(
      /invalid file name/,
    );
  });
});
