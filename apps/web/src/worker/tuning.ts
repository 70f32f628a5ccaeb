// Start-up tuning results kept across visits: Engine.load times the kernels' variants on this device once per page
// (seconds on a CPU device, where building each candidate's pipeline is slow); the table is saved in IndexedDB
// under a fingerprint of the kernels' sources, so a later visit with the same kernels reuses it and a build with
// changed kernels measures afresh. Entries name their device, so another GPU never takes them. The engine runs on
// the worker's default device (getDevice()), which is where the table is loaded from and saved.
import { createStore, get, set } from "idb-keyval";
import { getDevice, loadTuneTable, tuneTable, type TuneTable } from "webart/engine";

declare const __WEBART_KERNELS__: string;

const db = createStore("webart-tune", "tables");
const KEY = "table";

interface Saved {
  kernels: string;
  table: TuneTable;
}

/** Loads the saved table when it was measured on these kernels. Never fails the caller: tuning just runs again. */
export async function restoreTuning(): Promise<void> {
  try {
    const saved = await get<Saved>(KEY, db);
    if (saved?.kernels === __WEBART_KERNELS__) loadTuneTable(await getDevice(), saved.table);
  } catch (e) {
    console.warn(`webart: saved kernel tuning not loaded (${(e as Error).message}); measuring again`);
  }
}

/** Saves the table as it is now (after an engine loaded). */
export async function saveTuning(): Promise<void> {
  try {
    await set(KEY, { kernels: __WEBART_KERNELS__, table: tuneTable(await getDevice()) } satisfies Saved, db);
  } catch (e) {
    console.warn(`webart: kernel tuning not saved (${(e as Error).message})`);
  }
}
