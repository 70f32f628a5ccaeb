// A buffer pool with size buckets, and the engine's GPU memory accounting.

/** Sizes are rounded up to a bucket so freed buffers are reused by similar requests. */
export function bucketSize(bytes: number): number {
  const b = Math.max(16, Math.ceil(bytes / 4) * 4);
  // Powers of two by counting leading zeros (every buffer a step acquires comes here).
  if (b <= 4096) return 2 ** (32 - Math.clz32(b - 1));
  // Above 4 KiB: quarter-power-of-two steps, so at most 25% is wasted.
  const p = b < 2 ** 31 ? 2 ** (31 - Math.clz32(b)) : 2 ** Math.floor(Math.log2(b));
  const step = p / 4;
  return Math.ceil(b / step) * step;
}

const EXACT_TAGS = new Set(["weights", "kv", "lora", "optimizer"]);

/** Tags whose buffers go back to the device when released, not into the free lists: start-up tuning's problems, each
 *  of its own sizes, which would otherwise stay on the device beside the model's buffers (its plan counts them live). */
const TRANSIENT_TAGS = new Set(["tune"]);

export interface MemoryStats {
  /** Bytes of buffers handed out and not yet released. */
  liveBytes: number;
  peakLiveBytes: number;
  /** Bytes of all buffers that exist on the device (live + pooled free ones). */
  allocatedBytes: number;
  peakAllocatedBytes: number;
  buffersCreated: number;
  poolHits: number;
  /** Live bytes by tag (e.g. "weights", "kv", "activations"). */
  byTag: Record<string, number>;
  /** The largest live bytes each tag reached (since the last resetPeak). */
  peakByTag: Record<string, number>;
  /** The most bytes asked of one buffer bound by shaders (every tag but readbacks' "staging"), since the last
   *  resetPeak: what the memory plan's largestBinding must cover. */
  largestBuffer: number;
}

export class BufferPool {
  /** Free buffers by size and usage (size * 1024 + usage: usage flags fit in 10 bits). */
  private free = new Map<number, GPUBuffer[]>();
  /** Each buffer's record, made when it is created and updated when it is handed out again. */
  /** `id`: the buffer's place in creation order (stats.buffersCreated when it was made). */
  private meta = new WeakMap<GPUBuffer, { key: number; size: number; tag: string; live: boolean; id: number }>();
  readonly stats: MemoryStats = {
    liveBytes: 0,
    peakLiveBytes: 0,
    allocatedBytes: 0,
    peakAllocatedBytes: 0,
    buffersCreated: 0,
    poolHits: 0,
    byTag: {},
    peakByTag: {},
    largestBuffer: 0,
  };
  /** Recorders created and not yet submitted: while any is open, released buffers wait for a submit. */
  openRecorders = 0;
  /** Buffers released while a recorded command may still use them: freed at the next submit. */
  private pendingRelease: GPUBuffer[] = [];
  /** Bytes of the buffers waiting in pendingRelease. */
  pendingBytes = 0;

  constructor(
    private device: GPUDevice,
    private maxBufferSize: number,
  ) {}

  /** While a Recorder captures a Tape (beginCapture to endCapture): the buffers handed out since it began. */
  private captured?: Set<GPUBuffer>;
  /** Buffers handed out and released within the capture, free again at once for the rest of it (by key). */
  private capturedFree = new Map<number, GPUBuffer[]>();
  /** Buffers handed out again from capturedFree: a host write would overtake their earlier use. */
  private capturedReused = new Set<GPUBuffer>();
  /** Host writes (hostWrite) during the capture: its tape would replay this step's data. */
  captureWrites = 0;

  /**
   * Starts a capture: until endCapture, a buffer handed out and then released is free again at once for the rest of
   * the capture, not after the next submit. That is safe for work on the device alone: a command buffer's dispatches
   * and copies run in the order they were recorded, each after the last. Only a host write (writeBuffer, which runs
   * before the command buffer) could reach such a buffer ahead of the work recorded earlier: `fresh` acquires (for
   * the host) never get one, and hostWrite refuses a buffer reused this way.
   */
  beginCapture(): void {
    if (this.captured) throw new Error("BufferPool.beginCapture: a capture is already open");
    this.captured = new Set();
    this.captureWrites = 0;
  }

  get capturing(): boolean {
    return !!this.captured;
  }

  /** Called before a host write to `buf` (Gpu.write): counted while a capture is open, and refused for a buffer
   *  released and handed out again within it (the write would overtake its earlier use). */
  hostWrite(buf: GPUBuffer): void {
    if (!this.captured) return;
    if (this.capturedReused.has(buf)) {
      throw new Error(`Gpu.write: "${buf.label}" was reused within a capture; the write would overtake its use`);
    }
    this.captureWrites++;
  }

  /** Ends the capture: every buffer handed out during it is live again and returned, for its tape to hold. */
  endCapture(): GPUBuffer[] {
    const held = this.captured;
    if (!held) throw new Error("BufferPool.endCapture: no capture is open");
    this.captured = undefined;
    for (const list of this.capturedFree.values())
      for (const buf of list) {
        const m = this.meta.get(buf)!;
        m.live = true;
        this.count(m.size, m.tag);
      }
    this.capturedFree.clear();
    this.capturedReused.clear();
    return [...held];
  }

  private count(size: number, tag: string): void {
    this.stats.liveBytes += size;
    this.stats.byTag[tag] = (this.stats.byTag[tag] ?? 0) + size;
    this.stats.peakByTag[tag] = Math.max(this.stats.peakByTag[tag] ?? 0, this.stats.byTag[tag]);
    this.stats.peakLiveBytes = Math.max(this.stats.peakLiveBytes, this.stats.liveBytes);
  }

  /** `fresh`: for the host to write or read (an upload, a readback's staging): never a buffer released within an
   *  open capture, nor one the capture's tape will hold. */
  acquire(bytes: number, usage: GPUBufferUsageFlags, tag = "other", label?: string, fresh = false): GPUBuffer {
    // Long-lived tensors (weights, KV cache, adapter and optimizer state) get their exact size: bucket
    // rounding (up to 25%) would waste memory that is never handed back; scratch buffers are bucketed.
    // A bucket past the device's largest buffer is cut back to the exact size, which may still fit.
    const exact = Math.max(16, Math.ceil(bytes / 16) * 16);
    const bucket = EXACT_TAGS.has(tag) ? exact : bucketSize(bytes);
    const size = bucket > this.maxBufferSize ? exact : bucket;
    if (size > this.maxBufferSize) {
      throw new Error(
        `GPU buffer of ${bytes} bytes (${label ?? tag}) exceeds the device's maxBufferSize ${this.maxBufferSize}; ` +
          "split the tensor or use a smaller model / batch.",
      );
    }
    if (tag !== "staging") this.stats.largestBuffer = Math.max(this.stats.largestBuffer, bytes);
    const key = size * 1024 + usage;
    let buf = fresh ? undefined : this.capturedFree.get(key)?.pop();
    if (buf) {
      const m = this.meta.get(buf)!;
      m.tag = tag;
      m.live = true;
      this.capturedReused.add(buf);
      this.count(size, tag);
      return buf;
    }
    buf = this.free.get(key)?.pop();
    if (buf) {
      this.stats.poolHits++;
      const m = this.meta.get(buf)!;
      m.tag = tag;
      m.live = true;
    } else {
      buf = this.device.createBuffer({ size, usage, label: label ?? tag });
      const id = this.stats.buffersCreated++;
      this.stats.allocatedBytes += size;
      this.stats.peakAllocatedBytes = Math.max(this.stats.peakAllocatedBytes, this.stats.allocatedBytes);
      this.meta.set(buf, { key, size, tag, live: true, id });
    }
    if (!fresh) this.captured?.add(buf);
    this.count(size, tag);
    return buf;
  }

  /** Returns a buffer to the pool. Safe to call right after recording commands that use it:
   *  the buffer becomes reusable only after the next submit. */
  release(buf: GPUBuffer): void {
    const m = this.meta.get(buf);
    if (!m || !m.live) throw new Error(`BufferPool.release: buffer "${buf.label}" is not live in this pool`);
    m.live = false;
    this.stats.liveBytes -= m.size;
    this.stats.byTag[m.tag] -= m.size;
    if (this.captured?.has(buf)) {
      let list = this.capturedFree.get(m.key);
      if (!list) this.capturedFree.set(m.key, (list = []));
      list.push(buf);
      return;
    }
    this.pendingRelease.push(buf);
    this.pendingBytes += m.size;
    if (this.openRecorders === 0) this.flushReleases();
  }

  /** Called after a submit: pending releases become reusable. */
  flushReleases(): void {
    for (const buf of this.pendingRelease) {
      const m = this.meta.get(buf)!;
      if (TRANSIENT_TAGS.has(m.tag)) {
        this.stats.allocatedBytes -= m.size;
        this.meta.delete(buf);
        buf.destroy();
        continue;
      }
      let list = this.free.get(m.key);
      if (!list) this.free.set(m.key, (list = []));
      // Kept in order of creation, oldest last: acquire() hands out the oldest free buffer of a size, whatever order
      // they came back in, so a step that asks for the same sizes gets the same buffers (and finds its bind groups).
      let i = list.length;
      while (i > 0 && this.meta.get(list[i - 1])!.id < m.id) i--;
      list.splice(i, 0, buf);
    }
    this.pendingRelease = [];
    this.pendingBytes = 0;
  }

  /** Starts a new peak measurement: the peaks become the current levels (also by tag). */
  resetPeak(): void {
    this.stats.peakLiveBytes = this.stats.liveBytes;
    this.stats.peakAllocatedBytes = this.stats.allocatedBytes;
    this.stats.peakByTag = { ...this.stats.byTag };
    this.stats.largestBuffer = 0;
  }

  /** Called after trim() destroys buffers (the device drops what refers to them, e.g. cached bind groups). */
  onTrim?: () => void;

  /** Destroys every free pooled buffer, giving the memory back to the device. */
  trim(): void {
    // Pending releases may still sit in an unsubmitted encoder, so they are left for later.
    for (const list of this.free.values()) {
      for (const buf of list) {
        this.stats.allocatedBytes -= this.meta.get(buf)!.size;
        buf.destroy();
      }
    }
    this.free.clear();
    this.onTrim?.();
  }

  isLive(buf: GPUBuffer): boolean {
    return this.meta.get(buf)?.live ?? false;
  }
}
