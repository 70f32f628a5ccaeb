// The device layer: one GPUDevice with a buffer pool, a pipeline cache, batched command
// recording (recorder.ts), uploads/readbacks, memory accounting, device-loss reporting and optional
// per-dispatch timestamps. Kernels and the model sit on top; no math lives here.

import { findAdapter, type GpuApiOptions } from "./navigator.ts";
import { isCpuDevice } from "./device-kind.ts";
import { setDawnPolling } from "./polling.ts";
import { BufferPool, type MemoryStats } from "./pool.ts";
import { Params } from "./params.ts";
import { Recorder, UNIFORM_CHUNK } from "./recorder.ts";

export { Params };
export { Recorder, Tape, type TapeInput, type TapeOp } from "./recorder.ts";

export interface KernelSpec {
  /** Stable name, used in errors and profiles, e.g. "matmul_forward". */
  name: string;
  /** WGSL source. */
  code: string;
  /** Entry point; defaults to `name`. */
  entryPoint?: string;
  /** WGSL `override` constants. */
  overrides?: Record<string, number>;
}

const canonical = new Map<string, Map<string, KernelSpec>>();

/**
 * The one spec object for this kernel: the device finds a pipeline by its spec's identity at no cost, and by name,
 * overrides and code otherwise (a few microseconds a dispatch). Kernels whose overrides vary per call take theirs here.
 */
export function kernelSpec(
  name: string,
  code: string,
  overrides: Record<string, number> = {},
  entryPoint?: string,
): KernelSpec {
  let byKey = canonical.get(code);
  if (!byKey) canonical.set(code, (byKey = new Map()));
  let key = `${name}|${entryPoint ?? ""}`;
  for (const k in overrides) key += `|${k}=${overrides[k]}`;
  let s = byKey.get(key);
  if (!s) byKey.set(key, (s = { name, code, overrides, ...(entryPoint ? { entryPoint } : {}) }));
  return s;
}

export type Binding = GPUBuffer | { buffer: GPUBuffer; offset?: number; size?: number };

/**
 * A buffer's size in bytes. `GPUBuffer.size` is a native getter (~75 ns on Dawn in Node) and kernels check every
 * binding's size on every dispatch; sizes never change, so each is read once.
 */
export function sizeOf(buf: GPUBuffer): number {
  let n = sizes.get(buf);
  if (n === undefined) sizes.set(buf, (n = buf.size));
  return n;
}
const sizes = new WeakMap<GPUBuffer, number>();

export interface DeviceOptions extends GpuApiOptions {
  /** Record GPU timestamps around every dispatch (needs the timestamp-query feature). */
  profile?: boolean;
  /** Lower limits than the device has, e.g. to test splitting with a small storage binding. */
  limitOverrides?: Partial<Record<"maxStorageBufferBindingSize" | "maxBufferSize", number>>;
  /** Treat a CPU implementation (SwiftShader) as a GPU: the kernels' GPU layouts, variants and defaults
   *  (isCpuDevice false), to run those paths where no GPU is. Slow: they are built for thousands of threads. */
  asGpu?: boolean;
}

export class WgslError extends Error {
  constructor(
    readonly shader: string,
    readonly messages: { line: number; column: number; message: string; type: string }[],
    code: string,
  ) {
    const lines = code.split("\n");
    super(
      `WGSL compile error in shader "${shader}":\n` +
        messages
          .map(
            (m) =>
              `  ${shader}.wgsl:${m.line}:${m.column}: ${m.type}: ${m.message}\n    ${lines[m.line - 1]?.trim() ?? ""}`,
          )
          .join("\n"),
    );
    this.name = "WgslError";
  }
}

export class DeviceLostError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(`GPU device lost (${reason}): ${message}`);
    this.name = "DeviceLostError";
  }
}

const STORAGE = 0x80 | 0x04 | 0x08; // STORAGE | COPY_SRC | COPY_DST (GPUBufferUsage values, usable before globals exist)

/** Features the engine uses when the device has them. */
const WANTED_FEATURES = [
  "shader-f16",
  "subgroups",
  "timestamp-query",
  // Dawn's experimental tensor-core matrices (Vulkan cooperative matrix, Metal simdgroup matrix): the coop matmul.
  "chromium-experimental-subgroup-matrix",
] as GPUFeatureName[];

/** One matrix-multiply shape the device's subgroup matrices support (GPUSubgroupMatrixConfig). */
export interface SubgroupMatrixConfig {
  componentType: string;
  resultComponentType: string;
  M: number;
  N: number;
  K: number;
}

/** What a device runs on: the WebGPU adapter's info, the runtime, and whether robust buffer access is on. The
 *  kernels' layout defaults and the tuning table key on it. */
export interface DeviceKind {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  runtime: "browser" | "node";
  /** What compiles and runs the kernels (FoundAdapter.build): the browser's user agent, or "webgpu <version>". */
  build: string;
  robustness: boolean;
}

/** One measured kernel choice: the fastest candidate and the median ms of each. */
export interface TuneEntry {
  winner: string;
  ms: Record<string, number>;
}

export class Gpu {
  readonly pool: BufferPool;
  readonly features: Set<string>;
  readonly limits: GPUSupportedLimits;
  /** Effective limits (after limitOverrides). */
  readonly maxStorageBinding: number;
  readonly maxBufferSize: number;
  readonly lost: Promise<DeviceLostError>;
  lostError?: DeviceLostError;
  /** Uncaptured validation/internal errors, newest last (also logged). */
  readonly errors: string[] = [];
  /** Accumulated GPU time per kernel name, in ms, when profiling. */
  readonly profile = new Map<string, { ms: number; count: number }>();
  readonly profiling: boolean;
  /** Kernel choices measured on this device (filled by @webart/shaders' tune), by problem key: the key names the op
   *  and the shape it was measured on, so models of other shapes on this device measure their own. */
  readonly tuning = new Map<string, TuneEntry>();
  private pipelines = new Map<string, GPUComputePipeline>();
  private bySpec = new WeakMap<KernelSpec, GPUComputePipeline>();
  private pendingChecks: Promise<void>[] = [];
  /** The last submit still waiting for its turn (see _submit). */
  private submitting?: Promise<void>;
  private lostListeners = new Set<(e: DeviceLostError) => void>();
  private scopes = new Set<GpuScope>();
  pipelineCacheHits = 0;
  pipelineCacheMisses = 0;
  /** Bind groups by pipeline and resources: a decode step binds the same pooled buffers as the last one, and
   *  creating a bind group costs more host time than the rest of a dispatch. Cleared when the pool destroys. Kept by
   *  a hash of _bindGroup's key of numbers, each bucket checked against the whole key. */
  private bindGroups = new Map<number, { key: number[]; bg: GPUBindGroup }[]>();
  private bindGroupCount = 0;
  private scratchKey: number[] = [];
  private objectIds = new WeakMap<object, number>();
  private nextObjectId = 1;
  bindGroupHits = 0;
  /** Bind groups made because none fitted (each a native createBindGroup). */
  bindGroupMisses = 0;
  /** The shapes of the adapter's subgroup matrices, where the device has the feature (else empty). */
  subgroupMatrixConfigs: SubgroupMatrixConfig[] = [];
  /** The adapter's largest subgroup (0 where it does not say): a workgroup using subgroup matrices is a multiple. */
  subgroupMaxSize = 0;
  /** The adapter's smallest subgroup (0 where it does not say): lanes that must share a subgroup fit in it. */
  subgroupMinSize = 0;
  /** DeviceOptions.asGpu: isCpuDevice answers false whatever the adapter. */
  readonly asGpu: boolean;

  constructor(
    readonly device: GPUDevice,
    readonly kind: DeviceKind,
    readonly notes: string[],
    opts: DeviceOptions,
  ) {
    this.features = new Set(device.features as unknown as Iterable<string>);
    // A plain copy: the device's limits are native getters, ~0.2 us a read on the hot path (grid, uniforms).
    const limits: Record<string, unknown> = {};
    for (const k in device.limits) limits[k] = device.limits[k as keyof GPUSupportedLimits];
    this.limits = Object.freeze(limits) as unknown as GPUSupportedLimits;
    this.maxStorageBinding = Math.min(
      device.limits.maxStorageBufferBindingSize,
      opts.limitOverrides?.maxStorageBufferBindingSize ?? Infinity,
    );
    this.maxBufferSize = Math.min(device.limits.maxBufferSize, opts.limitOverrides?.maxBufferSize ?? Infinity);
    this.pool = new BufferPool(device, this.maxBufferSize);
    this.pool.onTrim = () => this.clearBindGroups();
    this.profiling = !!opts.profile && this.features.has("timestamp-query");
    this.asGpu = !!opts.asGpu;
    this.lost = device.lost.then((info) => {
      const err = new DeviceLostError(info.reason ?? "unknown", info.message || "(no message)");
      this.lostError = err;
      for (const l of this.lostListeners) l(err);
      return err;
    });
    device.addEventListener("uncapturederror", (ev) => {
      const msg = (ev as GPUUncapturedErrorEvent).error.message;
      this.errors.push(msg);
      console.error(`webart GPU error: ${msg}`);
    });
  }

  get memory(): MemoryStats {
    return this.pool.stats;
  }

  onLost(cb: (e: DeviceLostError) => void): () => void {
    this.lostListeners.add(cb);
    return () => this.lostListeners.delete(cb);
  }

  private checkAlive(): void {
    if (this.lostError) throw this.lostError;
  }

  /** Races a promise against device loss, so nothing waits forever on a dead device. */
  private guard<T>(p: Promise<T>): Promise<T> {
    return Promise.race([
      p,
      this.lost.then((e) => {
        throw e;
      }),
    ]);
  }

  /** The compiled pipeline for a kernel and its override constants, from the cache when possible. */
  pipeline(spec: KernelSpec): GPUComputePipeline {
    // Kernels keep their spec objects, so most dispatches are found by identity: building the key and hashing the
    // WGSL took ~20 us a dispatch, a few ms of every decode step.
    const same = this.bySpec.get(spec);
    if (same) {
      this.pipelineCacheHits++;
      return same;
    }
    const entryPoint = spec.entryPoint ?? spec.name;
    const overrides = spec.overrides ?? {};
    const okeys = Object.keys(overrides).sort();
    const key = `${spec.name}|${entryPoint}|${okeys.map((k) => `${k}=${overrides[k]}`).join(",")}|${hash(spec.code)}`;
    const hit = this.pipelines.get(key);
    if (hit) {
      this.pipelineCacheHits++;
      this.bySpec.set(spec, hit);
      return hit;
    }
    this.pipelineCacheMisses++;
    this.checkAlive();
    this.device.pushErrorScope("validation");
    const module = this.device.createShaderModule({ code: spec.code, label: spec.name });
    const pipeline = this.device.createComputePipeline({
      layout: "auto",
      label: `${spec.name}${okeys.length ? `{${okeys.map((k) => `${k}=${overrides[k]}`).join(",")}}` : ""}`,
      compute: { module, entryPoint, constants: overrides },
    });
    const scope = this.device.popErrorScope();
    this.pendingChecks.push(
      (async () => {
        const info = await module.getCompilationInfo();
        const errs = info.messages.filter((m) => m.type === "error");
        const verr = await scope;
        if (errs.length) {
          this.pipelines.delete(key);
          this.bySpec.delete(spec);
          throw new WgslError(
            spec.name,
            errs.map((m) => ({ line: m.lineNum, column: m.linePos, message: m.message, type: m.type })),
            spec.code,
          );
        }
        if (verr) {
          this.pipelines.delete(key);
          this.bySpec.delete(spec);
          throw new Error(`Pipeline "${spec.name}" (entry ${entryPoint}) failed validation: ${verr.message}`);
        }
      })(),
    );
    this.pipelines.set(key, pipeline);
    this.bySpec.set(spec, pipeline);
    return pipeline;
  }

  /** Compiles a kernel now and throws its WGSL errors, if any. */
  async compile(spec: KernelSpec): Promise<GPUComputePipeline> {
    const p = this.pipeline(spec);
    await this.flushChecks();
    return p;
  }

  private async flushChecks(): Promise<void> {
    if (!this.pendingChecks.length) return;
    const checks = this.pendingChecks;
    this.pendingChecks = [];
    await Promise.all(checks);
  }

  /** A storage buffer (tagged for memory accounting). Release it with `release()`. */
  buffer(bytes: number, tag = "activations", label?: string, usage = STORAGE, fresh = false): GPUBuffer {
    this.checkAlive();
    const buf = this.pool.acquire(bytes, usage, tag, label, fresh);
    // A tape's buffers are its own, held past the work a scope covers (Recorder.capture).
    if (!this.pool.capturing) for (const s of this.scopes) s.buffers.add(buf);
    return buf;
  }

  /**
   * Starts recording the buffers handed out by buffer()/upload() and the recorders opened from now on, so
   * that work which fails part-way can give back what it still holds (GpuScope.releaseLive). Recording is by
   * time, not by caller: while a scope is open, other work on this device must not hold buffers of its own
   * across an await (inference steps do not: theirs are released before they submit).
   */
  scope(): GpuScope {
    const s = new GpuScope(this);
    this.scopes.add(s);
    return s;
  }

  /** @internal used by GpuScope */
  _endScope(s: GpuScope): void {
    this.scopes.delete(s);
  }

  /** Host memory of uniform chunks whose data was written (Recorder): reused, so a step does not allocate and zero
   *  64 KiB for its uniforms. */
  private hostChunks: Uint32Array<ArrayBuffer>[] = [];

  /** @internal A uniform chunk's host memory (Recorder), not zeroed. */
  _hostChunk(): Uint32Array<ArrayBuffer> {
    return this.hostChunks.pop() ?? new Uint32Array(UNIFORM_CHUNK / 4);
  }

  /** @internal Gives a chunk's host memory back once its data has been written to the device. */
  _hostChunkBack(u: Uint32Array<ArrayBuffer>): void {
    if (this.hostChunks.length < 16) this.hostChunks.push(u);
  }

  release(...bufs: (GPUBuffer | undefined)[]): void {
    for (const b of bufs) if (b) this.pool.release(b);
  }

  /** Uploads a typed array into a new storage buffer. */
  upload(data: ArrayBufferView, tag = "activations", label?: string): GPUBuffer {
    const buf = this.buffer(data.byteLength, tag, label, STORAGE, true);
    this.write(buf, data);
    return buf;
  }

  write(buf: GPUBuffer, data: ArrayBufferView, offset = 0): void {
    this.checkAlive();
    this.pool.hostWrite(buf);
    const bytes = new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset, data.byteLength);
    const n = bytes.byteLength & ~3;
    if (n) this.device.queue.writeBuffer(buf, offset, bytes, 0, n);
    if (n !== bytes.byteLength) {
      const tail = new Uint8Array(4);
      tail.set(bytes.subarray(n));
      this.device.queue.writeBuffer(buf, offset + n, tail);
    }
  }

  /** Reads `size` bytes of a buffer back to the CPU (one submit + one map). */
  async read(buf: GPUBuffer, size = buf.size, offset = 0): Promise<ArrayBuffer> {
    const rec = this.recorder();
    const out = rec.read(buf, size, offset);
    await rec.submit();
    return out;
  }

  async readF32(buf: GPUBuffer, count?: number, offset = 0): Promise<Float32Array> {
    return new Float32Array(await this.read(buf, (count ?? (buf.size - offset) / 4) * 4, offset));
  }

  async readU32(buf: GPUBuffer, count?: number, offset = 0): Promise<Uint32Array> {
    return new Uint32Array(await this.read(buf, (count ?? (buf.size - offset) / 4) * 4, offset));
  }

  recorder(): Recorder {
    this.checkAlive();
    this.pool.openRecorders++;
    const rec = new Recorder(this);
    for (const s of this.scopes) s.recorders.push(rec);
    return rec;
  }

  /** Records one dispatch and submits it; convenient in tests, slow in hot paths. */
  async run(spec: KernelSpec, bindings: Binding[], workgroups: WorkgroupCount, params?: Params): Promise<void> {
    const rec = this.recorder();
    rec.dispatch(spec, bindings, workgroups, params);
    await rec.submit();
  }

  private objectId(o: object): number {
    let id = this.objectIds.get(o);
    if (id === undefined) this.objectIds.set(o, (id = this.nextObjectId++));
    return id;
  }

  private clearBindGroups(): void {
    this.bindGroups.clear();
    this.bindGroupCount = 0;
  }

  /**
   * @internal A bind group of `pipeline` over the uniform range (binding 0, when given) and these buffer bindings
   * (in order after it), made once and reused. Found by a key of numbers (object ids, offsets, sizes): a decode
   * step looks up ~150, and building a string key for each took a sizeable share of the host's encode time.
   */
  _bindGroup(
    pipeline: GPUComputePipeline,
    label: string,
    uniform: { buffer: GPUBuffer; offset: number; size: number } | undefined,
    bindings: Binding[],
  ): GPUBindGroup {
    const key = this.scratchKey;
    key.length = 0;
    key.push(this.objectId(pipeline));
    if (uniform) key.push(this.objectId(uniform.buffer), uniform.offset, uniform.size);
    else key.push(0);
    for (const x of bindings) {
      if ("buffer" in x) key.push(this.objectId(x.buffer), x.offset ?? 0, x.size ?? -1);
      else key.push(this.objectId(x), 0, -1);
    }
    let h = 0x811c9dc5;
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key[i], 0x01000193);
    h &= 0x3fffffff; // a small integer: Map keys that need no boxing
    const bucket = this.bindGroups.get(h);
    if (bucket) {
      outer: for (const e of bucket) {
        if (e.key.length !== key.length) continue;
        for (let i = 0; i < key.length; i++) if (e.key[i] !== key[i]) continue outer;
        this.bindGroupHits++;
        return e.bg;
      }
    }
    this.bindGroupMisses++;
    if (this.bindGroupCount >= 8192) this.clearBindGroups();
    const entries: GPUBindGroupEntry[] = [];
    if (uniform) entries.push({ binding: 0, resource: uniform });
    for (const x of bindings) entries.push({ binding: entries.length, resource: "buffer" in x ? x : { buffer: x } });
    const bg = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries, label });
    const e = { key: key.slice(), bg };
    if (bucket && this.bindGroups.has(h)) bucket.push(e);
    else this.bindGroups.set(h, [e]);
    this.bindGroupCount++;
    return bg;
  }

  /** Waits for all submitted work. */
  async sync(): Promise<void> {
    await this.guard(this.device.queue.onSubmittedWorkDone());
  }

  /** @internal used by Recorder */
  async _submit(cmd: GPUCommandBuffer[], after: () => void): Promise<void> {
    const run = () => {
      this.checkAlive();
      this.device.queue.submit(cmd);
    };
    try {
      // Submits at once when nothing waits (no await before it), so a caller that does not await the submit can
      // encode the next command buffer while the device runs this one. A submit that waits on new pipelines'
      // checks holds later submits behind it: the queue gets them in the order they were made.
      if (!this.pendingChecks.length && !this.submitting) run();
      else {
        const prev = this.submitting;
        const turn = (async () => {
          if (prev) await prev.catch(() => {});
          await this.flushChecks();
          run();
        })();
        this.submitting = turn;
        try {
          await turn;
        } finally {
          if (this.submitting === turn) this.submitting = undefined;
        }
      }
    } finally {
      this.pool.openRecorders--;
      after();
      this.pool.flushReleases();
    }
  }

  /** @internal Whether a recorder's submit waits its turn behind a new pipeline's checks (see _submit). */
  get _submitWaiting(): boolean {
    return this.submitting !== undefined;
  }

  /** Whether a recorder's submit waits its turn behind a new pipeline's checks: work recorded now would hold its
   *  buffers (and its uniforms) until that submit is made. A caller recording step after step may wait for it. */
  get submitWaiting(): boolean {
    return this._submitWaiting;
  }

  /** @internal */
  _guard<T>(p: Promise<T>): Promise<T> {
    return this.guard(p);
  }

  /** A 1-D dispatch of `n` workgroups folded into x/y so no dimension passes the 65535 limit. */
  grid(n: number): [number, number, number] {
    const max = this.limits.maxComputeWorkgroupsPerDimension;
    if (n <= max) return [Math.max(1, n), 1, 1];
    const y = Math.ceil(n / max);
    return [Math.ceil(n / y), y, 1];
  }

  profileTable(): { name: string; ms: number; count: number }[] {
    return [...this.profile.entries()].map(([name, v]) => ({ name, ...v })).sort((a, b) => b.ms - a.ms);
  }

  destroy(): void {
    this.pool.trim();
    this.device.destroy();
  }
}

export type WorkgroupCount = number | [number, number?, number?];

/** What a Gpu.scope() recorded: buffers handed out and recorders opened while it was open. */
export class GpuScope {
  readonly buffers = new Set<GPUBuffer>();
  readonly recorders: Recorder[] = [];

  constructor(private gpu: Gpu) {}

  /** Stops recording (what was recorded stays). */
  end(): void {
    this.gpu._endScope(this);
  }

  /** The recorded buffers that are still live. */
  live(): GPUBuffer[] {
    return [...this.buffers].filter((b) => this.gpu.pool.isLive(b));
  }

  /**
   * After a failure: ends the scope, drops the recorders it opened that were never submitted (their commands
   * never run), and releases its buffers that are still live. Returns the bytes released.
   */
  releaseLive(): number {
    this.end();
    for (const r of this.recorders) r.abandon();
    const live = this.live();
    const before = this.gpu.pool.stats.liveBytes;
    this.gpu.release(...live);
    return before - this.gpu.pool.stats.liveBytes;
  }
}

const hashes = new Map<string, string>();

/** FNV-1a of a kernel's WGSL, once per string (a Map finds a string by V8's cached hash). */
function hash(s: string): string {
  let out = hashes.get(s);
  if (out === undefined) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
    hashes.set(s, (out = (h >>> 0).toString(36) + s.length.toString(36)));
  }
  return out;
}

const cache = new Map<string, Promise<Gpu>>();

/** Creates (or returns the shared) GPU device with the limits and features the engine needs. */
export async function getDevice(opts: DeviceOptions = {}): Promise<Gpu> {
  const key = JSON.stringify(opts);
  let p = cache.get(key);
  if (!p) {
    p = createDevice(opts);
    cache.set(key, p);
    p.then(
      (g) => g.lost.then(() => cache.delete(key)),
      () => cache.delete(key),
    );
  }
  return p;
}

export async function createDevice(opts: DeviceOptions = {}): Promise<Gpu> {
  const robustness = opts.robustness ?? false;
  const { adapter, notes, runtime, build } = await findAdapter({ ...opts, robustness });
  const L = adapter.limits;
  const requiredLimits: Record<string, number> = {
    maxStorageBufferBindingSize: L.maxStorageBufferBindingSize,
    maxBufferSize: L.maxBufferSize,
    maxComputeWorkgroupStorageSize: L.maxComputeWorkgroupStorageSize,
    maxComputeInvocationsPerWorkgroup: L.maxComputeInvocationsPerWorkgroup,
    maxComputeWorkgroupSizeX: L.maxComputeWorkgroupSizeX,
    maxComputeWorkgroupSizeY: L.maxComputeWorkgroupSizeY,
    maxStorageBuffersPerShaderStage: L.maxStorageBuffersPerShaderStage,
    maxComputeWorkgroupsPerDimension: L.maxComputeWorkgroupsPerDimension,
  };
  const requiredFeatures = WANTED_FEATURES.filter((f) => adapter.features.has(f));
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures, label: "webart" });
  const info = adapter.info;
  const summary: DeviceKind = {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    runtime,
    build,
    robustness: runtime === "browser" ? true : robustness,
  };
  const gpu = new Gpu(device, summary, notes, opts);
  if (runtime === "node") {
    // Dawn's own polling spins the JS thread while the device works: on a CPU device that is a core taken from it.
    const env = process.env.WEBART_DAWN_POLL;
    if (env !== undefined && env !== "immediate" && env !== "timer")
      throw new Error(`WEBART_DAWN_POLL="${env}": expected "immediate" (Dawn's own loop) or "timer" (~1 ms apart)`);
    const polling = env ?? (isCpuDevice(gpu) ? "timer" : "immediate");
    setDawnPolling(polling);
    if (polling === "timer") notes.push("webart: Dawn polls for finished GPU work every ~1 ms (WEBART_DAWN_POLL)");
  }
  gpu.subgroupMaxSize = (info as unknown as { subgroupMaxSize?: number }).subgroupMaxSize ?? 0;
  gpu.subgroupMinSize = (info as unknown as { subgroupMinSize?: number }).subgroupMinSize ?? 0;
  if (gpu.features.has("chromium-experimental-subgroup-matrix")) {
    const configs = (info as unknown as { subgroupMatrixConfigs?: Iterable<SubgroupMatrixConfig> })
      .subgroupMatrixConfigs;
    gpu.subgroupMatrixConfigs = [...(configs ?? [])].map((c) => ({
      componentType: c.componentType,
      resultComponentType: c.resultComponentType,
      M: c.M,
      N: c.N,
      K: c.K,
    }));
  }
  return gpu;
}
