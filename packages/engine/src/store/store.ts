// Where a run lives: `.art/{project}/models/{name}/...` on disk in Node, the same keys in IndexedDB in
// the browser. A step's files are written completely before the run's pointer moves to it, so a crash
// never leaves a half step.

export interface RunStore {
  readonly kind: "fs" | "idb" | "memory";
  read(path: string): Promise<Uint8Array | null>;
  write(path: string, data: Uint8Array | string): Promise<void>;
  append(path: string, text: string): Promise<void>;
  /** Paths directly or indirectly under a prefix. */
  list(prefix: string): Promise<string[]>;
  /** Removes a path and everything under it. */
  remove(prefix: string): Promise<void>;
  /**
   * Writes several files as one unit: either all of them become visible, or (after a crash) none.
   * `commitKey`'s value is written last, once everything else is durable.
   */
  writeAtomic(files: Record<string, Uint8Array | string>, commitKey: string, commitValue: string): Promise<void>;
  /** Where a path is for people and other programs: a file system path, or the key where there is none. */
  location?(path: string): string;
}

export const enc = (s: string) => new TextEncoder().encode(s);
export const dec = (b: Uint8Array) => new TextDecoder().decode(b);

export function runPrefix(project: string, name: string): string {
  for (const [what, v] of [
    ["project", project],
    ["model name", name],
  ] as const) {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(v)) {
      throw new Error(
        `${what} "${v}" is not allowed: use letters, digits, '.', '_' and '-' (not starting with '.' or '-')`,
      );
    }
  }
  return `${project}/models/${name}`;
}

/** In-memory store (tests, and runs that should leave nothing behind). */
export class MemoryStore implements RunStore {
  readonly kind = "memory" as const;
  readonly files = new Map<string, Uint8Array>();
  async read(p: string) {
    return this.files.get(p) ?? null;
  }
  async write(p: string, d: Uint8Array | string) {
    this.files.set(p, typeof d === "string" ? enc(d) : d);
  }
  async append(p: string, t: string) {
    const old = this.files.get(p);
    this.files.set(p, enc((old ? dec(old) : "") + t));
  }
  async list(prefix: string) {
    return [...this.files.keys()]
      .filter((k) => k === prefix || k.startsWith(prefix.endsWith("/") ? prefix : prefix + "/"))
      .sort();
  }
  async remove(prefix: string) {
    for (const k of await this.list(prefix)) this.files.delete(k);
  }
  async writeAtomic(files: Record<string, Uint8Array | string>, key: string, value: string) {
    for (const [p, d] of Object.entries(files)) await this.write(p, d);
    await this.write(key, value);
  }
}
