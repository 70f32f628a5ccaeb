// Command recording: a Recorder batches a step's dispatches, copies and readbacks into command buffers for the
// device's queue (submitting part-way where asked), and records them into a Tape once so later steps replay them.
import type { Binding, Gpu, KernelSpec, WorkgroupCount } from "./device.ts";
import type { Params } from "./params.ts";

/** Bytes of one uniform buffer a recorder writes its kernels' parameters into. */
export const UNIFORM_CHUNK = 64 * 1024;

/** One command of a Tape. */
export type TapeOp =
  | { kind: "dispatch"; pipeline: GPUComputePipeline; bindGroup: GPUBindGroup; x: number; y: number; z: number }
  | { kind: "copy"; src: GPUBuffer; srcOffset: number; dst: GPUBuffer; dstOffset: number; size: number }
  | { kind: "clear"; buf: GPUBuffer; offset: number; size?: number }
  /** Where the captured work would have submitted part-way (submitPart): a replay submits there. */
  | { kind: "part" };

/** A tape's input: `bytes` copied into `buffer` ahead of each replay. */
export interface TapeInput {
  buffer: GPUBuffer;
  bytes: number;
}

/**
 * Work recorded once (Recorder.capture to endCapture) that a Recorder records again as it is (replay): its
 * dispatches with their pipelines and bind groups, its copies and clears. It holds every buffer the capture handed
 * out (its temporaries, its outputs, its uniforms, written once by the capture's submit) until dispose(), so the
 * bind groups stay valid and nothing else gets those buffers. What changes from one replay to the next comes in
 * through its inputs. A replay records no host work but the native calls: for a decode step, ~150 dispatches that
 * the model's code would otherwise work out again (kernel choices, pool, bind groups, uniforms).
 */
export class Tape {
  readonly dispatches: number;
  /** Places where a replay submits part-way (submitPart, as the captured work asked to). */
  readonly parts: number;
  private disposed = false;

  constructor(
    private gpu: Gpu,
    readonly ops: readonly TapeOp[],
    readonly inputs: readonly TapeInput[],
    private held: GPUBuffer[],
    /** Why the capture cannot be replayed (a host write or a readback within it, profiling); undefined: it can. */
    readonly invalid?: string,
  ) {
    this.dispatches = ops.reduce((n, o) => n + (o.kind === "dispatch" ? 1 : 0), 0);
    this.parts = ops.reduce((n, o) => n + (o.kind === "part" ? 1 : 0), 0);
  }

  /** Bytes of the device's memory it holds (its inputs, temporaries, outputs and uniforms) until disposed. */
  get bytes(): number {
    return [...this.inputs.map((i) => i.buffer), ...this.held].reduce((n, b) => n + b.size, 0);
  }

  /** Whether replay() may record it: a valid capture, not disposed, whose recorder did not fail. */
  get live(): boolean {
    return !this.disposed && !this.invalid;
  }

  /** Gives its buffers back to the pool (reusable after the next submit, as any release). Safe to call twice. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.gpu.release(...this.inputs.map((i) => i.buffer), ...this.held);
  }
}

/** Records many dispatches and copies, then submits them as one command buffer. */
export class Recorder {
  private encoder: GPUCommandEncoder;
  private pass?: GPUComputePassEncoder;
  /** `taped`: made during a capture; its tape holds it. */
  private chunks: {
    buf: GPUBuffer;
    data: Uint8Array<ArrayBuffer>;
    u: Uint32Array<ArrayBuffer>;
    used: number;
    taped: boolean;
  }[] = [];
  /** The capture in progress (capture to endCapture). */
  private taping?: { ops: TapeOp[]; inputs: TapeInput[]; invalid?: string };
  /** The next uniform() starts a chunk of its own: a tape's uniforms share no chunk with other work. */
  private chunkBreak = false;
  /** minUniformBufferOffsetAlignment (a native getter: read once). */
  private align: number;
  private reads: {
    staging: GPUBuffer;
    size: number;
    resolve: (b: ArrayBuffer) => void;
    reject: (e: unknown) => void;
  }[] = [];
  private stamps: string[] = [];
  private querySet?: GPUQuerySet;
  private submitted = false;
  private flushScopes: Promise<GPUError | null>[] = [];
  dispatches = 0;
  private failHooks: (() => void)[] = [];
  /** Command buffers submitted early (submitPart, flushIfPending). */
  flushes = 0;
  /** submitPart does not submit (a capture still marks where it asked to): for work that is recorded, then dropped
   *  unsubmitted, so that none of it runs (ModelRunner.encodeOnly). */
  holdParts = false;

  private errorsAtStart: number;

  constructor(private gpu: Gpu) {
    this.encoder = gpu.device.createCommandEncoder();
    this.errorsAtStart = gpu.errors.length;
    this.align = gpu.limits.minUniformBufferOffsetAlignment;
  }

  /** Writes params into the current uniform chunk (a new one when full) and returns their range. */
  private uniform(params: Params): { buffer: GPUBuffer; offset: number; size: number } {
    const size = params.byteLength;
    let c: (typeof this.chunks)[number] | undefined = this.chunks[this.chunks.length - 1];
    // A full chunk: what is recorded so far goes to the device (as submitPart would), so that its chunk goes back to
    // the pool and a long recording (a prefill of many layers) holds one chunk, not one per 256 dispatches. Not while
    // capturing (the tape holds its chunks), nor where submitPart declines.
    if (c && !this.chunkBreak && c.used + size > UNIFORM_CHUNK && !this.taping && this.submitPart()) c = undefined;
    if (!c || this.chunkBreak || c.used + size > UNIFORM_CHUNK) {
      const buf = this.gpu.pool.acquire(UNIFORM_CHUNK, 0x40 | 0x08 /* UNIFORM | COPY_DST */, "uniforms");
      const u = this.gpu._hostChunk();
      c = { buf, data: new Uint8Array(u.buffer), u, used: 0, taped: !!this.taping };
      this.chunks.push(c);
      this.chunkBreak = false;
    }
    const offset = c.used;
    params.write(c.u, offset / 4);
    c.used = Math.ceil((offset + size) / this.align) * this.align;
    return { buffer: c.buf, offset, size };
  }

  dispatch(spec: KernelSpec, bindings: Binding[], workgroups: WorkgroupCount, params?: Params): void {
    if (this.submitted) throw new Error("Recorder: already submitted");
    const pipeline = this.gpu.pipeline(spec);
    const bindGroup = this.gpu._bindGroup(pipeline, spec.name, params && this.uniform(params), bindings);
    const one = typeof workgroups === "number";
    const x = one ? workgroups : workgroups[0];
    const y = one ? 1 : (workgroups[1] ?? 1);
    const z = one ? 1 : (workgroups[2] ?? 1);
    if (x === 0 || y === 0 || z === 0) return;
    this.taping?.ops.push({ kind: "dispatch", pipeline, bindGroup, x, y, z });
    let pass: GPUComputePassEncoder;
    if (this.gpu.profiling) {
      if (!this.querySet) this.querySet = this.gpu.device.createQuerySet({ type: "timestamp", count: 4096 });
      const i = this.stamps.length * 2;
      if (i + 2 > 4096) throw new Error("Recorder: more than 2048 profiled dispatches in one submit");
      this.endPass();
      pass = this.encoder.beginComputePass({
        timestampWrites: { querySet: this.querySet, beginningOfPassWriteIndex: i, endOfPassWriteIndex: i + 1 },
      });
      this.stamps.push(spec.name);
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.dispatchWorkgroups(x, y, z);
      pass.end();
    } else {
      pass = this.pass ??= this.encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
    this.dispatches++;
  }

  /** Calls `cb` if this recorder's work does not run: abandoned, or its submit failed. For state that the caller
   *  counts as done once recorded (say, weights brought up to date in this command buffer). */
  onFail(cb: () => void): void {
    this.failHooks.push(cb);
  }

  private failed(): void {
    const hooks = this.failHooks;
    this.failHooks = [];
    for (const cb of hooks) cb();
  }

  private endPass(): void {
    this.pass?.end();
    this.pass = undefined;
  }

  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, size: number): void {
    this.endPass();
    this.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, size);
    this.taping?.ops.push({ kind: "copy", src, srcOffset, dst, dstOffset, size });
  }

  clear(buf: GPUBuffer, offset = 0, size?: number): void {
    this.endPass();
    this.encoder.clearBuffer(buf, offset, size);
    this.taping?.ops.push({ kind: "clear", buf, offset, size });
  }

  /**
   * Starts capturing what this recorder records into a Tape (endCapture), for later recorders to replay. The work
   * is recorded here as usual too. `inputs` are buffers the captured work reads, handed over to the tape: each
   * replay copies its own sources into them first. While capturing, buffers handed out and released are free again
   * within the capture (BufferPool.beginCapture), and this recorder does not submit part-way: the tape marks where
   * submitPart was asked for, and replays submit there.
   */
  capture(inputs: TapeInput[]): void {
    if (this.submitted) throw new Error("Recorder.capture: already submitted");
    if (this.taping) throw new Error("Recorder.capture: a capture is already open");
    this.gpu.pool.beginCapture();
    this.taping = { ops: [], inputs, invalid: this.gpu.profiling ? "profiling" : undefined };
    this.chunkBreak = true;
  }

  /**
   * Ends the capture. The tape holds every buffer handed out since capture() and the capture's uniforms, which
   * this recorder's submit writes; should this recorder not run (abandoned, or its submit failed), the tape is
   * disposed. Its `invalid` says why it may not be replayed, where the captured work wrote from the host or read back.
   */
  endCapture(): Tape {
    const t = this.taping;
    if (!t) throw new Error("Recorder.endCapture: no capture is open");
    this.taping = undefined;
    this.chunkBreak = true;
    const writes = this.gpu.pool.captureWrites;
    const held = this.gpu.pool.endCapture();
    const invalid = t.invalid ?? (writes ? `${writes} host writes within it` : undefined);
    const tape = new Tape(this.gpu, t.ops, t.inputs, held, invalid);
    this.onFail(() => tape.dispose());
    return tape;
  }

  /** Records a tape's work again, after copying `sources` (one per tape input, in order) into its inputs. It submits
   *  part-way where the captured work asked to (submitPart, which may decline as it would for recorded work). */
  replay(tape: Tape, sources: GPUBuffer[]): void {
    if (this.submitted) throw new Error("Recorder: already submitted");
    if (!tape.live)
      throw new Error(`Recorder.replay: the tape ${tape.invalid ? `is invalid (${tape.invalid})` : "was disposed"}`);
    if (this.taping || this.gpu.profiling) throw new Error("Recorder.replay: not while capturing or profiling");
    if (sources.length !== tape.inputs.length) {
      throw new Error(`Recorder.replay: ${sources.length} sources for ${tape.inputs.length} inputs`);
    }
    tape.inputs.forEach((inp, i) => this.copy(sources[i], 0, inp.buffer, 0, inp.bytes));
    let pass = this.pass;
    let last: GPUComputePipeline | undefined;
    for (const op of tape.ops) {
      if (op.kind === "dispatch") {
        if (!pass) {
          pass = this.pass = this.encoder.beginComputePass();
          last = undefined;
        }
        // A pass keeps its pipeline from one dispatch to the next.
        if (op.pipeline !== last) pass.setPipeline((last = op.pipeline));
        pass.setBindGroup(0, op.bindGroup);
        pass.dispatchWorkgroups(op.x, op.y, op.z);
      } else if (op.kind === "part") {
        if (this.submitPart()) pass = undefined; // (a new encoder: its pass and pipeline start again)
      } else {
        this.endPass();
        pass = undefined;
        if (op.kind === "copy") this.encoder.copyBufferToBuffer(op.src, op.srcOffset, op.dst, op.dstOffset, op.size);
        else this.encoder.clearBuffer(op.buf, op.offset, op.size);
      }
    }
    this.dispatches += tape.dispatches;
  }

  /** Copies a buffer range to a staging buffer; the promise resolves after submit(). */
  read(buf: GPUBuffer, size = buf.size, offset = 0): Promise<ArrayBuffer> {
    if (this.taping) this.taping.invalid ??= "a readback within it";
    this.endPass();
    const padded = Math.ceil(size / 4) * 4;
    const staging = this.gpu.pool.acquire(padded, 0x01 | 0x08 /* MAP_READ | COPY_DST */, "staging", undefined, true);
    this.encoder.copyBufferToBuffer(buf, offset, staging, 0, padded);
    return new Promise((resolve, reject) => this.reads.push({ staging, size, resolve, reject }));
  }

  /**
   * Submits what is recorded so far when more than `minBytes` of released buffers wait for a submit, so the
   * pool can hand them out again, and goes on recording in a new command buffer (submitPart). Keeps a long step (a
   * training micro-batch, a prefill) within the memory of its live buffers.
   */
  flushIfPending(minBytes: number): void {
    if (this.gpu.pool.pendingBytes >= minBytes) this.submitPart();
  }

  /**
   * Submits what is recorded so far and goes on recording in a new command buffer, so the device starts on it while
   * the host records the rest. Returns whether it did. It does not while another recorder's submit waits its turn
   * (a pipeline's checks): this part would reach the queue ahead of work it may depend on (a decode run's last
   * step). Nor while profiling (one query set a recorder), nor once submitted, nor with holdParts. While capturing,
   * it marks the place in the tape (once, however often it is asked there) and does not submit.
   */
  submitPart(): boolean {
    const gpu = this.gpu;
    if (this.taping) {
      const ops = this.taping.ops;
      if (ops.length && ops[ops.length - 1].kind !== "part") ops.push({ kind: "part" });
      return false;
    }
    if (this.submitted || this.querySet || this.holdParts || gpu._submitWaiting) return false;
    this.endPass();
    this.writeUniforms();
    gpu.device.pushErrorScope("validation");
    gpu.device.queue.submit([this.encoder.finish()]);
    this.flushScopes.push(gpu.device.popErrorScope());
    // Written uniforms were copied at writeBuffer: the chunks go back to the pool with the other releases.
    this.releaseChunks();
    this.chunks = [];
    gpu.pool.flushReleases();
    this.encoder = gpu.device.createCommandEncoder();
    this.flushes++;
    return true;
  }

  /** Writes the uniform chunks to their buffers. writeBuffer copies the data, so their host memory goes back to the
   *  device's spares at once. */
  private writeUniforms(): void {
    const gpu = this.gpu;
    for (const c of this.chunks) {
      gpu.device.queue.writeBuffer(c.buf, 0, c.data, 0, c.used);
      gpu._hostChunkBack(c.u);
    }
  }

  /**
   * Drops a recorder that will not be submitted (its work failed part-way): its uniforms and readback
   * buffers go back to the pool and the pool stops holding releases for it. Its reads never resolve. No-op
   * once submitted. Returns whether it dropped the recorder (false: it had been submitted).
   */
  abandon(): boolean {
    if (this.submitted) return false;
    if (this.taping) this.endCapture(); // disposed just below, with the other work that does not run
    this.submitted = true;
    this.failed();
    for (const c of this.chunks) this.gpu._hostChunkBack(c.u);
    this.releaseChunks();
    for (const r of this.reads) this.gpu.pool.release(r.staging);
    this.querySet?.destroy();
    this.chunks = [];
    this.reads = [];
    if (--this.gpu.pool.openRecorders === 0) this.gpu.pool.flushReleases();
    return true;
  }

  /** The uniform chunks go back to the pool, but a tape's (it holds them). */
  private releaseChunks(): void {
    for (const c of this.chunks) if (!c.taped) this.gpu.pool.release(c.buf);
  }

  async submit(): Promise<void> {
    if (this.submitted) throw new Error("Recorder: already submitted");
    if (this.taping) throw new Error("Recorder.submit: a capture is still open (endCapture)");
    this.submitted = true;
    this.endPass();
    const gpu = this.gpu;
    let resolveBuf: GPUBuffer | undefined;
    let stampStaging: GPUBuffer | undefined;
    if (this.querySet && this.stamps.length) {
      const n = this.stamps.length * 2;
      resolveBuf = gpu.pool.acquire(n * 8, 0x200 | 0x04 /* QUERY_RESOLVE | COPY_SRC */, "staging");
      stampStaging = gpu.pool.acquire(n * 8, 0x01 | 0x08, "staging");
      this.encoder.resolveQuerySet(this.querySet, 0, n, resolveBuf, 0);
      this.encoder.copyBufferToBuffer(resolveBuf, 0, stampStaging, 0, n * 8);
    }
    this.writeUniforms();
    gpu.device.pushErrorScope("validation");
    let scope: Promise<GPUError | null> | undefined;
    try {
      await gpu._submit([this.encoder.finish()], () => this.releaseChunks());
    } catch (e) {
      for (const r of this.reads) r.reject(e);
      this.failed();
      throw e;
    } finally {
      scope = gpu.device.popErrorScope();
    }
    // An invalid command buffer runs nothing: readbacks would return stale data, so it is an error here.
    const verr = (await Promise.all(this.flushScopes)).find((e) => e) ?? (await scope);
    const recorded = gpu.errors.slice(this.errorsAtStart);
    if (verr || recorded.length) {
      const err = new Error(
        `GPU validation failed; nothing in this submit ran: ${verr?.message ?? recorded.join("; ")}`,
      );
      for (const r of this.reads) {
        gpu.pool.release(r.staging);
        r.reject(err);
      }
      this.failed();
      throw err;
    }
    const waits: Promise<void>[] = this.reads.map(async (r) => {
      try {
        await gpu._guard(r.staging.mapAsync(0x01 /* GPUMapMode.READ */, 0, Math.ceil(r.size / 4) * 4));
        const out = r.staging.getMappedRange(0, Math.ceil(r.size / 4) * 4).slice(0, r.size);
        r.staging.unmap();
        gpu.pool.release(r.staging);
        r.resolve(out);
      } catch (e) {
        r.reject(e);
        throw e;
      }
    });
    if (stampStaging) {
      const st = stampStaging;
      waits.push(
        (async () => {
          await gpu._guard(st.mapAsync(0x01));
          const t = new BigInt64Array(st.getMappedRange().slice(0, this.stamps.length * 16));
          st.unmap();
          this.stamps.forEach((name, i) => {
            const ms = Number(t[2 * i + 1] - t[2 * i]) / 1e6;
            const p = gpu.profile.get(name) ?? { ms: 0, count: 0 };
            p.ms += Math.max(0, ms);
            p.count++;
            gpu.profile.set(name, p);
          });
          gpu.pool.release(st);
          gpu.pool.release(resolveBuf!);
          this.querySet!.destroy();
        })(),
      );
    }
    await Promise.all(waits);
  }
}
