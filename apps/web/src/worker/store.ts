// The runs' IndexedDB store, observed: the trainer learns when a checkpoint starts being written (the
// "saving" phase), and a full disk surfaces as a StorageFullError that says what to do.
import { IdbStore, type RunStore } from "webart/engine";

export class StorageFullError extends Error {
  constructor(detail: string) {
    super(
      `Browser storage is full${detail ? ` (${detail})` : ""}. Nothing already saved is lost: the run is paused at its last ` +
        `complete checkpoint. Delete runs you no longer need (Runs list) or free disk space, then Resume.`,
    );
    this.name = "StorageFullError";
  }
}

const isQuota = (e: unknown) =>
  e instanceof Error &&
  (e.name === "QuotaExceededError" ||
    /quota/i.test(e.message) ||
    (e as { inner?: Error }).inner?.name === "QuotaExceededError");

export class ObservedStore implements RunStore {
  readonly kind = "idb" as const;
  /** Called when an atomic (checkpoint) write begins. */
  onCommit: () => void = () => {};

  constructor(private inner: RunStore = new IdbStore()) {}

  private async guard<T>(p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (e) {
      if (isQuota(e)) throw new StorageFullError((e as Error).message || "the browser refused to store more");
      throw e;
    }
  }

  read(p: string) {
    return this.guard(this.inner.read(p));
  }
  write(p: string, d: Uint8Array | string) {
    return this.guard(this.inner.write(p, d));
  }
  append(p: string, t: string) {
    return this.guard(this.inner.append(p, t));
  }
  list(prefix: string) {
    return this.guard(this.inner.list(prefix));
  }
  remove(prefix: string) {
    return this.guard(this.inner.remove(prefix));
  }
  writeAtomic(files: Record<string, Uint8Array | string>, key: string, value: string) {
    this.onCommit();
    return this.guard(this.inner.writeAtomic(files, key, value));
  }
}

export const store = new ObservedStore();

/** Free bytes the browser grants this origin, or null when it does not say. */
export async function freeBytes(): Promise<{ usage: number; quota: number } | null> {
  const est = await navigator.storage?.estimate?.();
  return est && est.quota !== undefined ? { usage: est.usage ?? 0, quota: est.quota } : null;
}

/** Refuses to start a step whose checkpoint would not fit, before anything of it is written. */
export async function checkRoom(needBytes: number): Promise<void> {
  const est = await freeBytes();
  if (!est) return;
  const free = est.quota - est.usage;
  if (free < needBytes) {
    const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
    throw new StorageFullError(`${mb(free)} free of ${mb(est.quota)}, a step needs about ${mb(needBytes)}`);
  }
}
