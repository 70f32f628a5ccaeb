// Start-up tuning kept between processes and visits. Engine.load times the kernels' variants for the model's shapes
// on its device (seconds on a CPU device, mostly compiling the candidates; on an H200, Qwen-sized loads took 8-15 s
// with it) and saves the results: a JSON file in Node, IndexedDB in a browser. A later load on the same device with
// the same kernels reads them back and times nothing. Entries name their device (deviceKey), so another GPU or
// robustness setting measures its own. A table saved by a build with other kernels (KERNELS_FINGERPRINT), or compiled
// by another browser version or another Dawn for Node (DeviceKind.build), is not used. Nothing here fails a load: a
// cache that cannot be read or written is reported (console.warn) and tuning simply runs.
import { createStore, get, set } from "idb-keyval";
import { isNode, type Gpu } from "@webart/gpu";
import { deviceKey, KERNELS_FINGERPRINT, loadTuneTable, tuneTable, type TuneTable } from "@webart/shaders";

/** A device table as it is kept: the kernels it was measured on, and its entries (device key + "|" + problem key). */
export interface SavedTuning {
  kernels: string;
  /** What compiled and ran the kernels (DeviceKind.build: the browser's user agent, or "webgpu <version>" in Node):
   *  an update of either, a new shader compiler, measures again. */
  build?: string;
  table: TuneTable;
}

/** Whether a full key (device key + "|" + problem key) is this device's. */
const onDevice = (gpu: Gpu) => {
  const prefix = `${deviceKey(gpu)}|`;
  return (key: string) => key.startsWith(prefix);
};

/** Whether a saved table was measured on these kernels, compiled by what compiles them here. */
const current = (gpu: Gpu, s: SavedTuning | undefined, kernels: string): s is SavedTuning =>
  !!s && s.kernels === kernels && s.build === gpu.kind.build;

/** Where start-up tuning's results are kept (EngineOptions.tuneCache). */
export interface TuneCache {
  /** Where, for messages: a file's path, or the IndexedDB store. */
  readonly where: string;
  /** The saved table, or undefined when there is none; throws when what is there is not one. */
  read(): Promise<SavedTuning | undefined>;
  write(saved: SavedTuning): Promise<void>;
}

/** Turns the default cache off in Node: WEBART_TUNING_CACHE=off. */
const OFF = new Set(["off", "0", "false", "none"]);

/** A JSON file; written whole to a temporary file renamed into place, so a reader never sees half of one. */
export function fileTuneCache(path: string): TuneCache {
  // Named at run time, so a browser build never resolves them.
  const [fsName, pathName] = ["node:fs/promises", "node:path"];
  const fs = () => import(/* @vite-ignore */ fsName) as Promise<typeof import("node:fs/promises")>;
  return {
    where: path,
    async read() {
      let text: string;
      try {
        text = await (await fs()).readFile(path, "utf8");
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
        throw e;
      }
      return checkSaved(JSON.parse(text));
    },
    async write(saved) {
      const f = await fs();
      const { dirname } = (await import(/* @vite-ignore */ pathName)) as typeof import("node:path");
      await f.mkdir(dirname(path), { recursive: true });
      const tmp = `${path}.${Math.random().toString(36).slice(2)}.tmp`;
      await f.writeFile(tmp, JSON.stringify(saved, null, 1) + "\n");
      await f.rename(tmp, path);
    },
  };
}

/** An IndexedDB store (the browser's default; the web app's earlier visits saved theirs here). */
export function idbTuneCache(dbName = "webart-tune", storeName = "tables"): TuneCache {
  let db: ReturnType<typeof createStore> | undefined;
  const store = () => (db ??= createStore(dbName, storeName));
  return {
    where: `IndexedDB ${dbName}/${storeName}`,
    async read() {
      const v = await get<unknown>("table", store());
      return v === undefined ? undefined : checkSaved(v);
    },
    async write(saved) {
      await set("table", saved, store());
    },
  };
}

/**
 * The cache Engine.load uses when its options name none: in Node the file $WEBART_TUNING_CACHE (off turns it off),
 * else $XDG_CACHE_HOME/webart/tuning.json, else ~/.cache/webart/tuning.json; in a browser, IndexedDB. None where
 * the kernels have no fingerprint (their sources running unbuilt, outside the tests). `npm run bench` turns it off
 * (WEBART_TUNING_CACHE=off): its loads measure afresh.
 */
export async function defaultTuneCache(): Promise<TuneCache | undefined> {
  if (KERNELS_FINGERPRINT === undefined) return undefined;
  if (isNode()) {
    const env = process.env;
    const set = env.WEBART_TUNING_CACHE?.trim();
    if (set && OFF.has(set.toLowerCase())) return undefined;
    if (set) return fileTuneCache(set);
    const osName = "node:os";
    const os = (await import(/* @vite-ignore */ osName)) as typeof import("node:os");
    return fileTuneCache(`${env.XDG_CACHE_HOME || `${os.homedir()}/.cache`}/webart/tuning.json`);
  }
  return typeof indexedDB === "undefined" ? undefined : idbTuneCache();
}

function checkSaved(v: unknown): SavedTuning {
  const s = v as SavedTuning;
  if (typeof s?.kernels !== "string" || typeof s.table !== "object" || s.table === null || Array.isArray(s.table))
    throw new Error('not a saved tuning table (expected {"kernels": "...", "table": {...}})');
  return s;
}

/** What Engine.load's tuning did (Engine.startupTuning). */
export interface StartupTuning {
  /** Whether it ran (EngineOptions.tune). */
  ran: boolean;
  /** Entries read from the cache for this device and kernels (calibration included). */
  restored: number;
  /** Entries timed in this load (0 when the cache held all of them, or another load in the process had). */
  measured: number;
  /** Where the results are kept; absent with no cache. */
  cache?: string;
  /** Time the load spent in tuning (timing, or only looking the choices up), ms. */
  ms: number;
}

/**
 * Loads the entries this device lacks from the cache's table, when it was saved under these kernels; returns how
 * many. Never throws: an unreadable cache is reported and tuning measures again (and the next save replaces it).
 */
export async function restoreTuning(gpu: Gpu, cache: TuneCache, kernels = KERNELS_FINGERPRINT): Promise<number> {
  if (kernels === undefined) return 0;
  try {
    const saved = await cache.read();
    if (!current(gpu, saved, kernels)) return 0;
    // This device's entries, except those it has measured itself in this process.
    const [mine, skip] = [onDevice(gpu), `${deviceKey(gpu)}|`.length];
    const missing = Object.entries(saved.table).filter(([k]) => mine(k) && !gpu.tuning.has(k.slice(skip)));
    return loadTuneTable(gpu, Object.fromEntries(missing));
  } catch (e) {
    console.warn(
      `webart: saved kernel tuning in ${cache.where} not loaded (${(e as Error).message}); measuring again, ` +
        "and the next save replaces it",
    );
    return 0;
  }
}

/** How many choices the cache holds for this device under these kernels (0 where it cannot be read). */
export async function savedChoices(gpu: Gpu, cache: TuneCache, kernels = KERNELS_FINGERPRINT): Promise<number> {
  if (kernels === undefined) return 0;
  try {
    const saved = await cache.read();
    if (!current(gpu, saved, kernels)) return 0;
    return Object.keys(saved.table).filter(onDevice(gpu)).length;
  } catch {
    return 0;
  }
}

/**
 * Saves this device's entries, keeping those of other devices saved under the same kernels (a table saved under other
 * kernels is replaced). Never throws: a cache that cannot be written is reported, and the next load measures again.
 */
export async function saveTuning(gpu: Gpu, cache: TuneCache, kernels = KERNELS_FINGERPRINT): Promise<void> {
  if (kernels === undefined) return;
  try {
    let others: TuneTable = {};
    try {
      const saved = await cache.read();
      if (current(gpu, saved, kernels)) {
        const mine = onDevice(gpu);
        others = Object.fromEntries(Object.entries(saved.table).filter(([k]) => !mine(k)));
      }
    } catch {
      // Unreadable: replaced by this device's table (restoreTuning has said so).
    }
    await cache.write({ kernels, build: gpu.kind.build, table: { ...others, ...tuneTable(gpu) } });
  } catch (e) {
    console.warn(`webart: kernel tuning not saved to ${cache.where} (${(e as Error).message})`);
  }
}

/** What a load's tuning did, in words: "16 kernel choices timed in 9.5 s; kept in PATH", "16 read back in 0.05 s from
 *  PATH" (the speed report's row). */
export function startupTuningText(t: StartupTuning): string {
  if (!t.ran) return "off (EngineOptions.tune: false)";
  const took = `${(t.ms / 1000).toFixed(t.ms < 1000 ? 2 : 1)} s`;
  if (!t.measured && !t.restored) return `every choice made by an earlier load on this device (${took})`;
  const what = [
    ...(t.measured ? [`${t.measured} kernel choices timed`] : []),
    ...(t.restored ? [`${t.restored} read back`] : []),
  ].join(", ");
  const where = !t.cache ? " (no tuning cache)" : t.measured ? `; kept in ${t.cache}` : ` from ${t.cache}`;
  return `${what} in ${took}${where}`;
}

/** The same as one line for commands to print (webart train, serve). */
export function startupTuningLine(t: StartupTuning): string {
  return `start-up tuning: ${startupTuningText(t)}`;
}
