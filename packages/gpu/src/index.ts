// @webart/gpu, the ground floor: the WebGPU device (Node through Dawn, or the browser's), the buffer pool, the
/// <reference types="@webgpu/types" preserve="true" />
// command recorder, kernel pipelines, the seeded random generator and half-float helpers. It imports no other
// webart package.
export * from "./device.ts";
export * from "./navigator.ts";
export * from "./device-kind.ts";
export { BufferPool, bucketSize, type MemoryStats } from "./pool.ts";
export * from "./random.ts";
export * from "./half.ts";
export { timeGpu } from "./timing.ts";
export { setDawnPolling, dawnPolling, type DawnPolling } from "./polling.ts";
