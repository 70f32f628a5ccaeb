export * from "./device.ts";
export * from "./navigator.ts";
export { BufferPool, bucketSize, type MemoryStats } from "./pool.ts";
