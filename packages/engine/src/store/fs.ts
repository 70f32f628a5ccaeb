// RunStore on the file system (Node). Atomic writes go to a temporary directory that is renamed
// into place, then the commit key is replaced by rename (both atomic on POSIX).
import { enc, type RunStore } from "./store.ts";

type Fs = typeof import("node:fs/promises");
type PathMod = typeof import("node:path");

export class FsStore implements RunStore {
  readonly kind = "fs" as const;
  private constructor(
    readonly root: string,
    private fs: Fs,
    private path: PathMod,
  ) {}

  static async open(root: string): Promise<FsStore> {
    const fsName = "node:fs/promises";
    const pathName = "node:path";
    const fs = (await import(/* @vite-ignore */ fsName)) as Fs;
    const path = (await import(/* @vite-ignore */ pathName)) as PathMod;
    await fs.mkdir(root, { recursive: true });
    return new FsStore(path.resolve(root), fs, path);
  }

  private abs(p: string): string {
    const a = this.path.resolve(this.root, p);
    if (a !== this.root && !a.startsWith(this.root + this.path.sep))
      throw new Error(`store path "${p}" escapes ${this.root}`);
    return a;
  }

  location(p: string): string {
    return this.abs(p);
  }

  async read(p: string): Promise<Uint8Array | null> {
    try {
      return new Uint8Array(await this.fs.readFile(this.abs(p)));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw e;
    }
  }

  async write(p: string, d: Uint8Array | string): Promise<void> {
    const a = this.abs(p);
    await this.fs.mkdir(this.path.dirname(a), { recursive: true });
    const tmp = `${a}.tmp-${process.pid}-${Date.now()}`;
    await this.fs.writeFile(tmp, typeof d === "string" ? enc(d) : d);
    await this.fs.rename(tmp, a);
  }

  async append(p: string, t: string): Promise<void> {
    const a = this.abs(p);
    await this.fs.mkdir(this.path.dirname(a), { recursive: true });
    await this.fs.appendFile(a, t);
  }

  async list(prefix: string): Promise<string[]> {
    const base = this.abs(prefix);
    const out: string[] = [];
    const walk = async (dir: string) => {
      let entries: import("node:fs").Dirent[];
      try {
        entries = await this.fs.readdir(dir, { withFileTypes: true });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOTDIR") {
          out.push(this.path.relative(this.root, dir));
          return;
        }
        if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
        throw e;
      }
      for (const ent of entries) {
        const full = this.path.join(dir, ent.name);
        if (ent.name.includes(".tmp-")) continue;
        if (ent.isDirectory()) await walk(full);
        else out.push(this.path.relative(this.root, full).split(this.path.sep).join("/"));
      }
    };
    await walk(base);
    return out.sort();
  }

  async remove(prefix: string): Promise<void> {
    await this.fs.rm(this.abs(prefix), { recursive: true, force: true });
  }

  async writeAtomic(files: Record<string, Uint8Array | string>, key: string, value: string): Promise<void> {
    // Group files by their top directory under a common parent and stage each directory whole.
    const dirs = new Map<string, [string, Uint8Array | string][]>();
    for (const [p, d] of Object.entries(files)) {
      const dir = this.path.posix.dirname(p);
      if (!dirs.has(dir)) dirs.set(dir, []);
      dirs.get(dir)!.push([this.path.posix.basename(p), d]);
    }
    for (const [dir, list] of dirs) {
      const final = this.abs(dir);
      const stage = `${final}.tmp-${process.pid}-${Date.now()}`;
      await this.fs.mkdir(stage, { recursive: true });
      for (const [name, d] of list) {
        const fh = await this.fs.open(this.path.join(stage, name), "w");
        await fh.writeFile(typeof d === "string" ? enc(d) : d);
        await fh.sync();
        await fh.close();
      }
      await this.fs.rm(final, { recursive: true, force: true });
      await this.fs.rename(stage, final);
    }
    await this.write(key, value);
  }
}
