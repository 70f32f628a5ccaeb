// Random-access byte sources for model files: memory, browser File/Blob, a Node file path, and a URL read with
// HTTP Range requests. Weights are read tensor by tensor through these, never as one whole-file buffer.

export interface ByteSource {
  /** File name, path or URL, used in error messages. */
  readonly name: string;
  /** Total size in bytes. */
  readonly size: number;
  /** Exactly `length` bytes from `offset`, in a fresh buffer the caller owns (byteOffset 0). */
  read(offset: number, length: number): Promise<Uint8Array<ArrayBuffer>>;
  /** Releases a file handle, where there is one. */
  close?(): Promise<void>;
}

/** A file that does not exist (ENOENT, HTTP 404); model directories turn this into "absent". */
export class NotFoundError extends Error {
  constructor(readonly file: string) {
    super(`${file}: not found`);
    this.name = "NotFoundError";
  }
}

export class SourceError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = "SourceError";
  }
}

function checkRange(src: ByteSource, offset: number, length: number): void {
  if (
    !Number.isSafeInteger(offset) ||
    !Number.isSafeInteger(length) ||
    offset < 0 ||
    length < 0 ||
    offset + length > src.size
  )
    throw new SourceError(
      src.name,
      `read of ${length} bytes at offset ${offset} is outside the file (${src.size} bytes)`,
    );
}

export function memorySource(bytes: Uint8Array, name = "memory"): ByteSource {
  const src: ByteSource = {
    name,
    size: bytes.byteLength,
    async read(offset, length) {
      checkRange(src, offset, length);
      // A copy even from a Node Buffer, whose slice() is a view into the whole file (callers use .buffer).
      return Uint8Array.prototype.slice.call(bytes, offset, offset + length);
    },
  };
  return src;
}

/** A browser File or Blob (also Node's), read by slicing so only the requested range is loaded. */
export function blobSource(blob: Blob, name = (blob as Partial<File>).name || "blob"): ByteSource {
  const src: ByteSource = {
    name,
    size: blob.size,
    async read(offset, length) {
      checkRange(src, offset, length);
      return new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
    },
  };
  return src;
}

/** @internal */
type NodeFs = typeof import("node:fs/promises");

/** @internal Node builtins are imported by a computed name so that browser bundlers leave them alone. */
export async function nodeFs(): Promise<NodeFs> {
  const name = "node:fs/promises";
  return (await import(/* @vite-ignore */ name)) as NodeFs;
}

/** A local file in Node, read with positioned reads on one open handle. */
export async function fileSource(path: string): Promise<ByteSource> {
  const fs = await nodeFs();
  let handle: Awaited<ReturnType<NodeFs["open"]>>;
  try {
    handle = await fs.open(path, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new NotFoundError(path);
    throw new SourceError(path, `cannot open (${(e as Error).message})`);
  }
  const stat = await handle.stat();
  if (!stat.isFile()) {
    await handle.close();
    throw new SourceError(path, "is not a regular file");
  }
  const src: ByteSource = {
    name: path,
    size: stat.size,
    async read(offset, length) {
      checkRange(src, offset, length);
      const out = new Uint8Array(length);
      for (let done = 0; done < length;) {
        const { bytesRead } = await handle.read(out, done, length - done, offset + done);
        if (bytesRead === 0)
          throw new SourceError(
            path,
            `file ended at ${offset + done} bytes, before ${offset + length} (was it truncated while open?)`,
          );
        done += bytesRead;
      }
      return out;
    },
    close: () => handle.close(),
  };
  return src;
}

export interface UrlSourceOptions {
  /** fetch to use (default: globalThis.fetch). */
  fetch?: typeof fetch;
  /** Extra request headers, e.g. Authorization. */
  headers?: Record<string, string>;
  /**
   * What to do when the server ignores Range (answers 200 with the whole file, as `python -m http.server`
   * does): "buffer" keeps that body in memory and serves reads from it; "error" refuses. Default "buffer".
   */
  noRange?: "buffer" | "error";
}

/**
 * A file over HTTP(S). One probe request (Range bytes=0-0) learns the size and whether Range works;
 * every read after that is one Range request. Throws NotFoundError on 404.
 */
export async function urlSource(url: string, opts: UrlSourceOptions = {}): Promise<ByteSource> {
  const doFetch = opts.fetch ?? globalThis.fetch;
  const get = async (range: string): Promise<Response> => {
    try {
      return await doFetch(url, { headers: { ...opts.headers, Range: range } });
    } catch (e) {
      throw new SourceError(url, `request failed (${(e as Error).message})`);
    }
  };
  const probe = await get("bytes=0-0");
  if (probe.status === 404 || probe.status === 410) {
    await probe.body?.cancel();
    throw new NotFoundError(url);
  }
  let size: number;
  if (probe.status === 206 || probe.status === 416) {
    // "bytes 0-0/1234", or "bytes */0" when the file is empty.
    const total = /\/(\d+)\s*$/.exec(probe.headers.get("content-range") ?? "")?.[1];
    await probe.body?.cancel();
    if (total === undefined)
      throw new SourceError(
        url,
        `HTTP ${probe.status} without a usable Content-Range header (${probe.headers.get("content-range")})`,
      );
    size = Number(total);
  } else if (probe.ok) {
    if (opts.noRange === "error") {
      await probe.body?.cancel();
      throw new SourceError(
        url,
        "the server ignores HTTP Range requests (answered 200 to a Range request); serve the model from a server " +
          'that supports Range, or pass noRange: "buffer" to download whole files into memory',
      );
    }
    return memorySource(new Uint8Array(await probe.arrayBuffer()), url);
  } else {
    await probe.body?.cancel();
    throw new SourceError(url, `HTTP ${probe.status} ${probe.statusText}`.trim());
  }

  const src: ByteSource = {
    name: url,
    size,
    async read(offset, length) {
      checkRange(src, offset, length);
      if (length === 0) return new Uint8Array(0);
      const res = await get(`bytes=${offset}-${offset + length - 1}`);
      if (res.status !== 206) {
        await res.body?.cancel();
        throw new SourceError(
          url,
          `expected HTTP 206 for bytes ${offset}-${offset + length - 1}, got ${res.status} ${res.statusText}`.trim(),
        );
      }
      const start = /bytes (\d+)-/.exec(res.headers.get("content-range") ?? "")?.[1];
      if (start !== undefined && Number(start) !== offset)
        throw new SourceError(url, `asked for bytes from ${offset}, the server sent them from ${start}`);
      const out = new Uint8Array(await res.arrayBuffer());
      if (out.byteLength !== length)
        throw new SourceError(url, `asked for ${length} bytes at ${offset}, got ${out.byteLength}`);
      return out;
    },
  };
  return src;
}
