// A model directory: named files (config.json, shards, ...) opened as ByteSources, wherever they live — a Node
// folder, a base URL, files picked in the browser (webkitdirectory input or a File System Access handle).

import { blobSource, fileSource, NotFoundError, urlSource, type ByteSource, type UrlSourceOptions } from "./source.ts";

export interface ModelFiles {
  /** Where the model comes from (path, URL or repo id), for messages. */
  readonly name: string;
  /** Opens `file`, a path relative to the model directory; null when it does not exist. */
  open(file: string): Promise<ByteSource | null>;
}

async function orNull(p: Promise<ByteSource>): Promise<ByteSource | null> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof NotFoundError) return null;
    throw e;
  }
}

/** Reads a whole (small) file as parsed JSON; null when absent. */
export async function readJson(files: ModelFiles, file: string): Promise<Record<string, unknown> | null> {
  const text = await readText(files, file);
  if (text === null) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new Error(`${files.name}/${file}: not valid JSON (${(e as Error).message})`, { cause: e });
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new Error(`${files.name}/${file}: expected a JSON object`);
  return json as Record<string, unknown>;
}

export async function readText(files: ModelFiles, file: string): Promise<string | null> {
  const src = await files.open(file);
  if (!src) return null;
  try {
    return new TextDecoder().decode(await src.read(0, src.size));
  } finally {
    await src.close?.();
  }
}

/** A folder on disk (Node). */
export function nodeDirFiles(dir: string): ModelFiles {
  const base = dir.replace(/[\\/]+$/, "");
  return { name: base, open: (file) => orNull(fileSource(`${base}/${file}`)) };
}

/** Files under a base URL, e.g. a static server or a hub resolve URL. */
export function urlFiles(baseUrl: string, opts: UrlSourceOptions = {}): ModelFiles {
  const loc = (globalThis as { location?: { href: string } }).location?.href;
  const base = new URL(baseUrl.endsWith("/") ? baseUrl : baseUrl + "/", loc);
  return { name: base.href, open: (file) => orNull(urlSource(new URL(file, base).href, opts)) };
}

/**
 * Files picked in the browser: an `<input type=file webkitdirectory>`'s FileList (paths come from
 * webkitRelativePath with the picked folder's own name dropped), a plain list of Files (by name), or a
 * name → Blob map.
 */
export function blobFiles(
  files: Iterable<File> | ArrayLike<File> | Map<string, Blob>,
  name = "selected files",
): ModelFiles {
  const byPath = new Map<string, Blob>();
  if (files instanceof Map) for (const [k, v] of files) byPath.set(k, v);
  else
    for (const f of Array.from(files)) {
      const rel = f.webkitRelativePath;
      byPath.set(rel ? rel.split("/").slice(1).join("/") : f.name, f);
    }
  return {
    name,
    async open(file) {
      const blob = byPath.get(file);
      return blob ? blobSource(blob, file) : null;
    },
  };
}

/** The parts of FileSystemDirectoryHandle this needs (so a stand-in works in tests and older typings). */
export interface DirectoryHandleLike {
  readonly name: string;
  getDirectoryHandle(name: string): Promise<DirectoryHandleLike>;
  getFileHandle(name: string): Promise<{ getFile(): Promise<File> }>;
}

/** A directory from the File System Access API (showDirectoryPicker, OPFS); files are looked up lazily. */
export function directoryHandleFiles(handle: DirectoryHandleLike): ModelFiles {
  return {
    name: handle.name,
    async open(file) {
      const parts = file.split("/");
      try {
        let dir = handle;
        for (const p of parts.slice(0, -1)) dir = await dir.getDirectoryHandle(p);
        return blobSource(await (await dir.getFileHandle(parts[parts.length - 1])).getFile(), file);
      } catch (e) {
        if ((e as Error).name === "NotFoundError" || (e as Error).name === "TypeMismatchError") return null;
        throw e;
      }
    },
  };
}
