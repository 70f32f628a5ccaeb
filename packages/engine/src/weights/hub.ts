// Hugging Face Hub repos as model directories: `org/name[@revision]` resolves to
// {endpoint}/{repo}/resolve/{revision}/{file}; files are downloaded once into a cache (Node: a folder, default
// ~/.cache/webart/hub; browser: the Cache API) and read from there by ranges. The endpoint is configurable so
// tests can stand a local server in for the hub.

import type { ModelFiles } from "./files.ts";
import { blobSource, fileSource, NotFoundError, nodeFs, SourceError, urlSource, type ByteSource } from "./source.ts";

export const HUB_ENDPOINT = "https://huggingface.co";

export interface HubOptions {
  /** Branch, tag or commit; default "main" (or the `@revision` in the id). */
  revision?: string;
  /** Hub base URL; default https://huggingface.co. */
  endpoint?: string;
  /** Where downloads are kept; false reads straight from the hub with Range requests. Default: per platform. */
  cache?: HubCache | false;
  /** Token for gated or private repos (sent as a Bearer Authorization header). */
  accessToken?: string;
  fetch?: typeof fetch;
  /** Download progress of one file (bytesTotal null when the server does not say). */
  onDownload?: (p: { file: string; bytesDone: number; bytesTotal: number | null }) => void;
}

export interface HubFileKey {
  repo: string;
  revision: string;
  file: string;
  url: string;
}

/** A store of downloaded hub files. */
export interface HubCache {
  readonly name: string;
  /** The cached file; "missing" when the hub answered 404 before; null when not cached. */
  get(key: HubFileKey): Promise<ByteSource | "missing" | null>;
  /** Stores a download streamed from `body` and returns it, readable by range. */
  put(key: HubFileKey, body: ReadableStream<Uint8Array>, onBytes?: (bytesDone: number) => void): Promise<ByteSource>;
  /** Remembers that the file does not exist, so later loads need no request for it. */
  putMissing(key: HubFileKey): Promise<void>;
}

const REPO_ID = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$/;

/** Whether a string looks like a hub repo id ("org/name" or "org/name@revision"). */
export function isRepoId(s: string): boolean {
  return REPO_ID.test(s);
}

export function parseRepoId(id: string): { repo: string; revision: string | null } {
  if (!isRepoId(id))
    throw new Error(`"${id}" is not a Hugging Face repo id (expected "org/name" or "org/name@revision")`);
  const at = id.indexOf("@");
  return at < 0 ? { repo: id, revision: null } : { repo: id.slice(0, at), revision: id.slice(at + 1) };
}

export function hubFileUrl(endpoint: string, repo: string, revision: string, file: string): string {
  const path = file.split("/").map(encodeURIComponent).join("/");
  return `${endpoint.replace(/\/+$/, "")}/${repo}/resolve/${encodeURIComponent(revision)}/${path}`;
}

function checkFileName(file: string): void {
  if (!file || file.startsWith("/") || file.split("/").some((p) => p === ".." || p === "." || p === ""))
    throw new Error(`invalid file name in a model repo: ${JSON.stringify(file)}`);
}

/** A hub repo as a ModelFiles; nothing is fetched until a file is opened. */
export function hubFiles(id: string, opts: HubOptions = {}): ModelFiles {
  const parsed = parseRepoId(id);
  const repo = parsed.repo;
  const revision = opts.revision ?? parsed.revision ?? "main";
  const endpoint = opts.endpoint ?? HUB_ENDPOINT;
  const doFetch = opts.fetch ?? globalThis.fetch;
  const headers: Record<string, string> = opts.accessToken ? { Authorization: `Bearer ${opts.accessToken}` } : {};
  const cache = opts.cache === undefined ? defaultHubCache() : opts.cache;
  const name = `${repo}@${revision}`;
  return {
    name,
    async open(file) {
      checkFileName(file);
      const url = hubFileUrl(endpoint, repo, revision, file);
      if (!cache) {
        try {
          return await urlSource(url, { fetch: doFetch, headers });
        } catch (e) {
          if (e instanceof NotFoundError) return null;
          throw e;
        }
      }
      const key = { repo, revision, file, url };
      const hit = await cache.get(key);
      if (hit === "missing") return null;
      if (hit) return hit;
      let res: Response;
      try {
        res = await doFetch(url, { headers });
      } catch (e) {
        throw new SourceError(url, `request failed (${(e as Error).message})`);
      }
      if (res.status === 404) {
        await res.body?.cancel();
        await cache.putMissing(key);
        return null;
      }
      if (res.status === 401 || res.status === 403) {
        await res.body?.cancel();
        throw new SourceError(
          url,
          `HTTP ${res.status}: ${name} is gated, private or does not exist; check the id, or pass accessToken`,
        );
      }
      if (!res.ok || !res.body) {
        await res.body?.cancel();
        throw new SourceError(url, `HTTP ${res.status} ${res.statusText}`.trim());
      }
      const total = Number(res.headers.get("content-length")) || null;
      const onBytes = opts.onDownload && ((n: number) => opts.onDownload!({ file, bytesDone: n, bytesTotal: total }));
      return cache.put(key, res.body, onBytes);
    },
  };
}

/** Node: a folder cache (default dir); browser: the Cache API when present; otherwise no cache. */
export function defaultHubCache(): HubCache | false {
  const g = globalThis as { process?: { versions?: { node?: string } }; caches?: CacheStorageLike };
  if (g.process?.versions?.node) return nodeHubCache();
  if (g.caches) return browserHubCache(g.caches);
  return false;
}

/**
 * Node folder cache: {dir}/{org}--{name}/{revision}/{file}, misses under .../{revision}/.missing/{file}.
 * Downloads go to a temporary file renamed into place when complete, so an interrupted one is never served.
 * Default dir: $WEBART_HUB_CACHE, else $XDG_CACHE_HOME/webart/hub, else ~/.cache/webart/hub.
 */
export function nodeHubCache(dir?: string): HubCache {
  const root = (async () => {
    if (dir) return dir;
    const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
    if (env.WEBART_HUB_CACHE) return env.WEBART_HUB_CACHE;
    const osName = "node:os";
    const os = (await import(/* @vite-ignore */ osName)) as typeof import("node:os");
    return `${env.XDG_CACHE_HOME || `${os.homedir()}/.cache`}/webart/hub`;
  })();
  const folder = async (k: HubFileKey) =>
    `${await root}/${k.repo.replace("/", "--")}/${encodeURIComponent(k.revision)}`;
  const parent = (p: string) => p.slice(0, p.lastIndexOf("/"));
  return {
    name: "node folder cache",
    async get(k) {
      const base = await folder(k);
      try {
        return await fileSource(`${base}/${k.file}`);
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
      }
      const fs = await nodeFs();
      return fs.access(`${base}/.missing/${k.file}`).then(
        () => "missing" as const,
        () => null,
      );
    },
    async put(k, body, onBytes) {
      const fs = await nodeFs();
      const path = `${await folder(k)}/${k.file}`;
      await fs.mkdir(parent(path), { recursive: true });
      const tmp = `${path}.${Math.random().toString(36).slice(2)}.part`;
      const out = await fs.open(tmp, "w");
      try {
        let done = 0;
        const reader = body.getReader();
        for (let r = await reader.read(); !r.done; r = await reader.read()) {
          await out.write(r.value);
          done += r.value.byteLength;
          onBytes?.(done);
        }
        await out.close();
        await fs.rename(tmp, path);
      } catch (e) {
        await out.close().catch(() => {});
        await fs.rm(tmp, { force: true });
        throw new SourceError(k.url, `download failed (${(e as Error).message})`);
      }
      return fileSource(path);
    },
    async putMissing(k) {
      const fs = await nodeFs();
      const path = `${await folder(k)}/.missing/${k.file}`;
      await fs.mkdir(parent(path), { recursive: true });
      await fs.writeFile(path, "");
    },
  };
}

/** The parts of the browser's CacheStorage this uses. */
export interface CacheStorageLike {
  open(name: string): Promise<{
    match(url: string): Promise<Response | undefined>;
    put(url: string, res: Response): Promise<void>;
  }>;
}

const MISSING_HEADER = "x-webart-missing";

/** Browser cache on the Cache API, keyed by resolve URL; cached files are read back as Blobs (by slicing). */
export function browserHubCache(storage: CacheStorageLike, cacheName = "webart-hub"): HubCache {
  const open = () => storage.open(cacheName);
  return {
    name: `Cache API "${cacheName}"`,
    async get(k) {
      const res = await (await open()).match(k.url);
      if (!res) return null;
      if (res.headers.get(MISSING_HEADER)) return "missing";
      return blobSource(await res.blob(), k.file);
    },
    async put(k, body, onBytes) {
      let done = 0;
      const counted = body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, ctl) {
            done += chunk.byteLength;
            onBytes?.(done);
            ctl.enqueue(chunk);
          },
        }),
      );
      const cache = await open();
      await cache.put(k.url, new Response(counted));
      const res = await cache.match(k.url);
      if (!res) throw new SourceError(k.url, "stored in the Cache API but could not be read back (storage quota?)");
      return blobSource(await res.blob(), k.file);
    },
    async putMissing(k) {
      await (await open()).put(k.url, new Response("", { headers: { [MISSING_HEADER]: "1" } }));
    },
  };
}
