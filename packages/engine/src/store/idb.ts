// RunStore in IndexedDB (browser), through idb-keyval. Keys are the same paths as on disk. The commit
// key is written in a separate transaction after all files, so a crash leaves the old pointer valid.
import { createStore, del, get, keys, set, setMany, delMany, type UseStore } from "idb-keyval";
import { dec, enc, type RunStore } from "./store.ts";

export class IdbStore implements RunStore {
  readonly kind = "idb" as const;
  private db: UseStore;

  constructor(dbName = "webart", storeName = "runs") {
    this.db = createStore(dbName, storeName);
  }

  async read(p: string): Promise<Uint8Array | null> {
    const v = await get<Uint8Array>(p, this.db);
    return v ?? null;
  }

  async write(p: string, d: Uint8Array | string): Promise<void> {
    await set(p, typeof d === "string" ? enc(d) : d, this.db);
  }

  async append(p: string, t: string): Promise<void> {
    const old = await this.read(p);
    await this.write(p, (old ? dec(old) : "") + t);
  }

  async list(prefix: string): Promise<string[]> {
    const all = (await keys(this.db)) as string[];
    const pre = prefix.endsWith("/") ? prefix : prefix + "/";
    return all.filter((k) => typeof k === "string" && (k === prefix || k.startsWith(pre))).sort();
  }

  async remove(prefix: string): Promise<void> {
    const ks = await this.list(prefix);
    if (ks.length) await delMany(ks, this.db);
    await del(prefix, this.db);
  }

  async writeAtomic(files: Record<string, Uint8Array | string>, key: string, value: string): Promise<void> {
    await setMany(
      Object.entries(files).map(([p, d]) => [p, typeof d === "string" ? enc(d) : d]),
      this.db,
    );
    await set(key, enc(value), this.db);
  }
}
