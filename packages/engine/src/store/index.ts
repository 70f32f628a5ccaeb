export * from "./store.ts";
export { FsStore } from "./fs.ts";
export { IdbStore } from "./idb.ts";
