import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDevice, getDevice, Params, WgslError, type Gpu, type KernelSpec } from "./device.ts";
import { isCpuDevice } from "./device-kind.ts";
import { dawnPolling } from "./polling.ts";

const scale: KernelSpec = {
  name: "scale_add",
  code: /* wgsl */ `
    struct P { n: u32, a: f32 }
    @group(0) @binding(0) var<uniform> p: P;
    @group(0) @binding(1) var<storage, read> x: array<f32>;
    @group(0) @binding(2) var<storage, read_write> y: array<f32>;
    override WG: u32 = 64;
    @compute @workgroup_size(WG)
    fn scale_add(@builtin(global_invocation_id) g: vec3u) {
      if (g.x < p.n) { y[g.x] = p.a * x[g.x] + y[g.x]; }
    }`,
};

/** y[i] = a: a kernel of this name (a new name, a new pipeline: its submit waits on its checks). */
function assignSpec(name: string): KernelSpec {
  return {
    name,
    code: /* wgsl */ `
      struct P { n: u32, a: f32 }
      @group(0) @binding(0) var<uniform> p: P;
      @group(0) @binding(1) var<storage, read_write> y: array<f32>;
      @compute @workgroup_size(64)
      fn ${name}(@builtin(global_invocation_id) g: vec3u) { if (g.x < p.n) { y[g.x] = p.a; } }`,
  };
}

let gpu: Gpu;
beforeAll(async () => {
  gpu = await getDevice();
});

describe("device layer on Dawn", () => {
  it("gets a device with the limits and features the engine asks for", async () => {
    expect(gpu.kind.runtime).toBe("node");
    expect(gpu.limits.maxStorageBufferBindingSize).toBeGreaterThanOrEqual(128 * 1024 * 1024);
    expect(gpu.limits.maxComputeInvocationsPerWorkgroup).toBeGreaterThanOrEqual(256);
    expect(await getDevice()).toBe(gpu); // shared
  });

  it("runs a kernel with uniforms and override constants and reads the result back", async () => {
    const n = 1000; // not a multiple of the workgroup
    const x = Float32Array.from({ length: n }, (_, i) => i * 0.5);
    const y0 = Float32Array.from({ length: n }, (_, i) => 1 - i);
    const bx = gpu.upload(x);
    const by = gpu.upload(y0);
    for (const WG of [64, 128]) {
      gpu.write(by, y0);
      await gpu.run({ ...scale, overrides: { WG } }, [bx, by], Math.ceil(n / WG), new Params().u32(n).f32(3));
      const y = await gpu.readF32(by, n);
      for (let i = 0; i < n; i += 37) expect(y[i]).toBeCloseTo(3 * x[i] + y0[i], 5);
    }
    gpu.release(bx, by);
  });

  it("on a CPU device Dawn's polls go on a timer, and readbacks still arrive; other setImmediate callbacks do not", async () => {
    if (process.env.WEBART_DAWN_POLL) return; // set by hand: the mode is the caller's
    expect(dawnPolling().mode).toBe(isCpuDevice(gpu) ? "timer" : "immediate");
    if (!isCpuDevice(gpu)) return;
    expect(gpu.notes.some((n) => n.includes("WEBART_DAWN_POLL"))).toBe(true);
    const before = dawnPolling().delayed;
    const x = Float32Array.from({ length: 4096 }, (_, i) => i);
    expect(await gpu.readF32(gpu.upload(x), 4096)).toEqual(x);
    const polled = dawnPolling().delayed;
    expect(polled).toBeGreaterThan(before);
    // The program's own callbacks: a plain function, a promise's resolver, a bound function, all run on setImmediate.
    let ran = 0;
    await new Promise<void>((resolve) => setImmediate(() => (ran++, resolve())));
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise<void>((resolve) =>
      setImmediate(
        function (this: unknown) {
          ran++;
          resolve();
        }.bind(null),
      ),
    );
    expect(ran).toBe(2);
    expect(dawnPolling().delayed).toBe(polled);
  });

  it("caches pipelines by shader and override constants", async () => {
    const misses = gpu.pipelineCacheMisses;
    const hits = gpu.pipelineCacheHits;
    const a = gpu.pipeline({ ...scale, overrides: { WG: 32 } });
    const b = gpu.pipeline({ ...scale, overrides: { WG: 32 } });
    const c = gpu.pipeline({ ...scale, overrides: { WG: 16 } });
    expect(a).toBe(b);
    expect(c).not.toBe(a);
    expect(gpu.pipelineCacheMisses - misses).toBe(2);
    expect(gpu.pipelineCacheHits - hits).toBe(1);
    // The same spec object again is found by identity; an equal copy by its key.
    const spec = { ...scale, overrides: { WG: 8 } };
    const d = gpu.pipeline(spec);
    expect(gpu.pipeline(spec)).toBe(d);
    expect(gpu.pipeline({ ...spec })).toBe(d);
    expect(gpu.pipelineCacheMisses - misses).toBe(3);
    expect(gpu.pipelineCacheHits - hits).toBe(3);
  });

  it("reuses pooled buffers and accounts memory going up and back down", async () => {
    const live0 = gpu.memory.liveBytes;
    const a = gpu.buffer(1 << 20, "test");
    expect(gpu.memory.liveBytes - live0).toBe(1 << 20);
    expect(gpu.memory.byTag.test).toBe(1 << 20);
    gpu.release(a);
    expect(gpu.memory.liveBytes).toBe(live0);
    await gpu.read(gpu.upload(new Float32Array(4))); // a submit makes released buffers reusable
    const hits = gpu.memory.poolHits;
    const b = gpu.buffer((1 << 20) - 100, "test");
    expect(b).toBe(a);
    expect(gpu.memory.poolHits).toBe(hits + 1);
    gpu.release(b);
    const alloc = gpu.memory.allocatedBytes;
    gpu.pool.trim();
    expect(gpu.memory.allocatedBytes).toBeLessThanOrEqual(alloc - (1 << 20));
  });

  it("a bucket past the device's largest buffer is cut to the exact size; the largest buffer asked for is kept", async () => {
    const limit = (1 << 20) + (1 << 16);
    const small = await createDevice({ limitOverrides: { maxBufferSize: limit } });
    try {
      small.pool.resetPeak();
      expect(small.memory.largestBuffer).toBe(0);
      // 1 MiB + 16 bytes rounds up to a 1.25 MiB bucket, past this device's 1.0625 MiB: it gets its own size and fits.
      const near = small.buffer((1 << 20) + 16, "activations");
      expect(small.memory.byTag.activations).toBe((1 << 20) + 16);
      expect(() => small.buffer(limit + 16, "activations")).toThrow(
        `GPU buffer of ${limit + 16} bytes (activations) exceeds the device's maxBufferSize ${limit}`,
      );
      // A readback's staging buffer is not bound by shaders: not counted.
      const staging = small.pool.acquire(limit, 0x01 | 0x08, "staging");
      expect(small.memory.largestBuffer).toBe((1 << 20) + 16);
      small.pool.release(staging);
      small.pool.resetPeak();
      expect(small.memory.largestBuffer).toBe(0);
      small.release(near);
    } finally {
      small.destroy();
    }
  });

  it("start-up tuning's buffers go back to the device when released, not into the pool's free lists", () => {
    const start = gpu.memory.allocatedBytes;
    const [a, b] = [gpu.buffer(3 << 20, "tune"), gpu.buffer(3 << 20, "test")];
    expect(gpu.memory.allocatedBytes - start).toBe(6 << 20);
    gpu.release(a, b); // no recorder is open: released at once
    // The tuning buffer is gone; the other waits in the pool for its next use.
    expect(gpu.memory.allocatedBytes - start).toBe(3 << 20);
    const again = gpu.buffer(3 << 20, "test");
    expect(again).toBe(b);
    gpu.release(again);
  });

  it("hands out the oldest free buffer of a size, whatever order they were released in", () => {
    const size = 3 << 20; // a bucket no other test uses
    const bufs = [0, 1, 2, 3].map(() => gpu.buffer(size, "test"));
    for (const order of [
      [2, 0, 3, 1],
      [3, 2, 1, 0],
    ]) {
      gpu.release(...order.map((i) => bufs[i]));
      expect([0, 1, 2, 3].map(() => gpu.buffer(size, "test"))).toEqual(bufs);
    }
    gpu.release(...bufs);
  });

  it("a scope gives back what work that failed part-way still holds: its live buffers and unsubmitted recorders", async () => {
    const m0 = {
      live: gpu.memory.liveBytes,
      staging: gpu.memory.byTag.staging ?? 0,
      uniforms: gpu.memory.byTag.uniforms ?? 0,
    };
    const before = gpu.buffer(256, "test");
    const scope = gpu.scope();
    const kept = gpu.buffer(1024, "test");
    const freed = gpu.upload(new Float32Array(64), "test");
    gpu.release(freed);
    const done = gpu.recorder();
    done.dispatch(scale, [before, kept], 1, new Params().u32(4).f32(1));
    await done.submit();
    const rec = gpu.recorder(); // recording when the "failure" happens: never submitted
    rec.dispatch(scale, [before, kept], 1, new Params().u32(4).f32(1));
    const pending = rec.read(kept, 16);
    gpu.release(gpu.buffer(512, "test")); // released while a recorder is open: held until it ends
    expect(gpu.pool.openRecorders).toBe(1);
    expect(scope.live()).toEqual([kept]);
    expect(scope.releaseLive()).toBe(1024);
    expect(gpu.pool.openRecorders).toBe(0);
    expect(gpu.memory.liveBytes).toBe(m0.live + 256);
    expect(gpu.memory.byTag.staging ?? 0).toBe(m0.staging);
    expect(gpu.memory.byTag.uniforms ?? 0).toBe(m0.uniforms);
    await expect(rec.submit()).rejects.toThrow(/already submitted/);
    void pending; // never resolves: its commands never ran
    const after = gpu.buffer(128, "test"); // the scope has ended
    expect(scope.live()).toEqual([]);
    gpu.release(before, after);
  });

  it("packs uniform fields in order, padded with zeros to 16 bytes", () => {
    const p = new Params().u32(7, 0xffffffff).i32(-3).f32(1.5).u32(9);
    const b = p.bytes();
    expect(b.byteLength).toBe(32);
    expect(p.byteLength).toBe(32);
    const u = new Uint32Array(b.buffer, b.byteOffset, 8);
    expect([...u.subarray(0, 2)]).toEqual([7, 0xffffffff]);
    expect(new Int32Array(b.buffer, b.byteOffset, 8)[2]).toBe(-3);
    expect(new Float32Array(b.buffer, b.byteOffset, 8)[3]).toBe(1.5);
    expect([...u.subarray(4)]).toEqual([9, 0, 0, 0]);
    expect(new Params().bytes().byteLength).toBe(16);
    // Written into a used chunk: the padding is zeroed, the words around are kept.
    const chunk = new Uint32Array(16).fill(0xdead);
    p.write(chunk, 4);
    expect([...chunk.subarray(0, 4)]).toEqual([0xdead, 0xdead, 0xdead, 0xdead]);
    expect([...chunk.subarray(8, 12)]).toEqual([9, 0, 0, 0]);
    expect(chunk[12]).toBe(0xdead);
    expect(() => new Params().u32(-1)).toThrow(/not a u32/);
  });

  it("makes a bind group once per pipeline, buffers and ranges, and reuses it", async () => {
    const n = 64;
    const [bx, by, bz] = [gpu.upload(new Float32Array(n).fill(1)), gpu.buffer(n * 4), gpu.buffer(2 * n * 4)];
    const hits = () => gpu.bindGroupHits;
    const step = async (y: GPUBuffer | { buffer: GPUBuffer; offset: number; size: number }) => {
      const rec = gpu.recorder();
      rec.dispatch(scale, [bx, y], 1, new Params().u32(n).f32(1));
      await rec.submit();
    };
    await step(by);
    const h0 = hits();
    await step(by); // same buffers, same uniform range of a fresh chunk from the pool: a hit
    expect(hits()).toBe(h0 + 1);
    await step(bz); // another buffer: a new group
    await step({ buffer: bz, offset: n * 4, size: n * 4 }); // another range of it: a new group
    expect(hits()).toBe(h0 + 1);
    await step({ buffer: bz, offset: n * 4, size: n * 4 });
    expect(hits()).toBe(h0 + 2);
    // The group found is the one for those bindings: y and the upper half of z both got x added.
    expect([...(await gpu.readF32(by, 2))]).toEqual([2, 2]);
    expect([...(await gpu.readF32(bz, 1, n * 4))]).toEqual([2]);
    expect([...(await gpu.readF32(bz, 1))]).toEqual([1]);
    gpu.release(bx, by, bz);
  });

  it("records many dispatches and submits them once", async () => {
    const n = 256;
    const bx = gpu.upload(new Float32Array(n).fill(1));
    const by = gpu.upload(new Float32Array(n));
    const rec = gpu.recorder();
    for (let i = 0; i < 10; i++) rec.dispatch(scale, [bx, by], 4, new Params().u32(n).f32(i));
    const out = rec.read(by, n * 4);
    await rec.submit();
    const y = new Float32Array(await out);
    expect(y[0]).toBe(45);
    expect(y[n - 1]).toBe(45);
    gpu.release(bx, by);
  });

  it("a recording of more dispatches than a uniform chunk holds submits part-way and keeps one chunk", async () => {
    const n = 64;
    const bx = gpu.upload(new Float32Array(n).fill(1));
    const by = gpu.upload(new Float32Array(n));
    await gpu.run(scale, [bx, by], 1, new Params().u32(n).f32(0)); // built and checked: nothing waits below
    await gpu.sync();
    const chunk = 64 * 1024;
    const slots = chunk / gpu.limits.minUniformBufferOffsetAlignment; // dispatches a chunk holds
    const before = gpu.pool.stats.byTag.uniforms ?? 0;
    gpu.pool.resetPeak();
    const rec = gpu.recorder();
    const count = 2 * slots + 10;
    for (let i = 0; i < count; i++) rec.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(1));
    expect(rec.flushes).toBe(2); // a part each time a chunk filled
    const out = rec.read(by, n * 4);
    await rec.submit();
    expect(new Float32Array(await out)[n - 1]).toBe(count); // every dispatch ran, in order
    expect((gpu.pool.stats.peakByTag.uniforms ?? 0) - before).toBe(chunk);
    // With parts held (Recorder.holdParts, the bench's A/B), the chunks stay: two filled, and one more.
    const held = gpu.recorder();
    held.holdParts = true;
    for (let i = 0; i < count; i++) held.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(1));
    expect(held.flushes).toBe(0);
    expect((gpu.pool.stats.byTag.uniforms ?? 0) - before).toBe(3 * chunk);
    await held.submit();
    expect((await gpu.readF32(by, 1))[0]).toBe(2 * count);
    gpu.release(bx, by);
  });

  it("submits in the order submit() was called, even when the first waits on a new pipeline's checks", async () => {
    const n = 64;
    const assign = assignSpec("assign");
    const bx = gpu.upload(new Float32Array(n).fill(1));
    const by = gpu.upload(new Float32Array(n));
    await gpu.run(scale, [bx, by], 1, new Params().u32(n).f32(0)); // scale_add's pipeline is built and checked
    const a = gpu.recorder();
    a.dispatch(assign, [by], 1, new Params().u32(n).f32(5)); // a new pipeline: its submit waits on its checks
    const b = gpu.recorder();
    b.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(2));
    // Neither awaited before the other is submitted (as a decode run submits its steps).
    await Promise.all([a.submit(), b.submit()]);
    const y = await gpu.readF32(by, n);
    expect(y[0]).toBe(7); // y = 5, then y += 2·1; the other order would leave 5
    gpu.release(bx, by);
  });

  it("does not submit part-way ahead of another recorder's submit that waits its turn", async () => {
    const n = 64;
    const assign = assignSpec("assign_part");
    const bx = gpu.upload(new Float32Array(n).fill(1));
    const by = gpu.upload(new Float32Array(n));
    await gpu.run(scale, [bx, by], 1, new Params().u32(n).f32(0));
    const a = gpu.recorder();
    a.dispatch(assign, [by], 1, new Params().u32(n).f32(5)); // a new pipeline: its submit waits on its checks
    const submitted = a.submit(); // not awaited, as a decode run submits its steps
    const b = gpu.recorder();
    b.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(2));
    const scratch = gpu.buffer(1 << 20);
    gpu.release(scratch);
    expect(gpu.pool.pendingBytes).toBeGreaterThanOrEqual(1 << 20);
    expect(b.submitPart()).toBe(false); // it would reach the queue before a's assign
    b.flushIfPending(1); // nor for memory
    expect(b.flushes).toBe(0);
    await Promise.all([submitted, b.submit()]);
    expect((await gpu.readF32(by, n))[0]).toBe(7); // y = 5, then y += 2·1; the other order would leave 5
    // With nothing waiting, a part goes at once and the rest follows it.
    const c = gpu.recorder();
    c.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(1));
    expect(c.submitPart()).toBe(true);
    c.dispatch(scale, [bx, by], 1, new Params().u32(n).f32(10));
    await c.submit();
    expect(c.flushes).toBe(1);
    expect((await gpu.readF32(by, n))[0]).toBe(18);
    gpu.release(bx, by);
  });

  it("surfaces a WGSL compile error with the shader's name, line and message", async () => {
    const bad: KernelSpec = {
      name: "broken_kernel",
      code: "@compute @workgroup_size(1)\nfn broken_kernel() {\n  let x: f32 = undefined_thing;\n}\n",
    };
    const err = await gpu.compile(bad).catch((e) => e);
    expect(err).toBeInstanceOf(WgslError);
    expect(err.message).toContain("broken_kernel.wgsl:3:");
    expect(err.message).toContain("undefined_thing");
  });

  it("reports device loss to whoever is waiting, and later calls fail fast", async () => {
    const own = await createDevice();
    let heard = "";
    own.onLost((e) => (heard = e.reason));
    own.device.destroy();
    const err = await own.lost;
    expect(err.reason).toBe("destroyed");
    expect(heard).toBe("destroyed");
    expect(() => own.buffer(16)).toThrow(/device lost/);
  });

  it("times dispatches with timestamp queries when profiling", async () => {
    const prof = await createDevice({ profile: true });
    if (!prof.features.has("timestamp-query")) return; // device without the feature: nothing to time
    const n = 1 << 16;
    const bx = prof.upload(new Float32Array(n));
    const by = prof.upload(new Float32Array(n));
    const rec = prof.recorder();
    rec.dispatch(scale, [bx, by], n / 64, new Params().u32(n).f32(1));
    rec.dispatch(scale, [bx, by], n / 64, new Params().u32(n).f32(1));
    await rec.submit();
    const row = prof.profileTable().find((r) => r.name === "scale_add");
    expect(row?.count).toBe(2);
    expect(row!.ms).toBeGreaterThan(0);
    prof.destroy();
  });
});

afterAll(() => {
  expect(gpu.errors).toEqual([]);
});

describe("tapes (Recorder.capture, replay)", () => {
  it("replay the captured work on new inputs, and hold the buffers it used, reused within the capture", async () => {
    const n = 300;
    const wg = Math.ceil(n / 64);
    const live0 = gpu.memory.liveBytes;
    // The work: t = 2x + 0 (a temporary), u = 3t + 0 (another, made after t is released, so it reuses t's buffer
    // within the capture), y = u, then y = 0.5x + y.
    const record = (rec: ReturnType<Gpu["recorder"]>, x: GPUBuffer, y: GPUBuffer) => {
      const t = gpu.buffer(n * 4);
      rec.clear(t);
      rec.dispatch(scale, [x, t], wg, new Params().u32(n).f32(2));
      const u = gpu.buffer(n * 4);
      rec.clear(u);
      rec.dispatch(scale, [t, u], wg, new Params().u32(n).f32(3));
      gpu.release(t);
      const v = gpu.buffer(n * 4); // t's buffer again, within the capture
      rec.copy(u, 0, v, 0, n * 4);
      gpu.release(u);
      rec.copy(v, 0, y, 0, n * 4);
      rec.dispatch(scale, [x, y], wg, new Params().u32(n).f32(0.5));
      return v;
    };
    const input = gpu.buffer(n * 4);
    const y = gpu.buffer(n * 4);
    const x0 = Float32Array.from({ length: n }, (_, i) => i - 7);
    const src0 = gpu.upload(x0);
    let rec = gpu.recorder();
    rec.copy(src0, 0, input, 0, n * 4);
    rec.capture([{ buffer: input, bytes: n * 4 }]);
    const v = record(rec, input, y);
    const tape = rec.endCapture();
    expect(tape.live).toBe(true);
    expect(tape.dispatches).toBe(3);
    expect(tape.ops.map((o) => o.kind)).toEqual(["clear", "dispatch", "clear", "dispatch", "copy", "copy", "dispatch"]);
    const t0 = tape.ops[0].kind === "clear" ? tape.ops[0].buf : undefined;
    expect(v).toBe(t0); // released within the capture, handed out again in it
    let read = rec.read(y, n * 4);
    gpu.release(src0);
    await rec.submit();
    const want = (x: Float32Array) => x.map((a) => 6 * a + 0.5 * a);
    expect(new Float32Array(await read)).toEqual(want(x0));
    // Replays on other inputs: the work again, by its native calls, in new recorders.
    for (const k of [1, 2]) {
      const xk = Float32Array.from({ length: n }, (_, i) => (i % 13) * k);
      const src = gpu.upload(xk);
      rec = gpu.recorder();
      rec.replay(tape, [src]);
      expect(rec.dispatches).toBe(3);
      read = rec.read(y, n * 4);
      gpu.release(src);
      await rec.submit();
      expect(new Float32Array(await read)).toEqual(want(xk));
    }
    // The tape holds its input, its temporaries (t and u) and its uniforms until disposed.
    gpu.release(y);
    expect(gpu.memory.liveBytes).toBeGreaterThan(live0);
    tape.dispose();
    tape.dispose(); // twice is safe
    expect(gpu.memory.liveBytes).toBe(live0);
    const other = gpu.recorder();
    expect(() => other.replay(tape, [input])).toThrow("disposed");
    other.abandon();
    expect(gpu.errors).toEqual([]);
  });

  it("submit part-way in replays where the captured work asked to, and not with holdParts", async () => {
    const n = 256;
    const x = gpu.upload(Float32Array.from({ length: n }, (_, i) => i % 17));
    const y = gpu.buffer(n * 4);
    const t = gpu.buffer(n * 4);
    const want = Float32Array.from({ length: n }, (_, i) => 7 * (i % 17));
    let rec = gpu.recorder();
    rec.capture([]);
    rec.clear(t);
    rec.dispatch(scale, [x, t], n / 64, new Params().u32(n).f32(2)); // t = 2x
    expect(rec.submitPart()).toBe(false); // marked, not submitted
    expect(rec.submitPart()).toBe(false); // the same place: one mark
    rec.copy(t, 0, y, 0, n * 4);
    rec.dispatch(scale, [x, y], n / 64, new Params().u32(n).f32(5)); // y = 2x + 5x
    rec.submitPart(); // at the end: a mark after the last command
    const tape = rec.endCapture();
    expect(tape.ops.map((o) => o.kind)).toEqual(["clear", "dispatch", "part", "copy", "dispatch", "part"]);
    expect(tape.parts).toBe(2);
    expect(rec.flushes).toBe(0);
    let read = rec.read(y);
    await rec.submit();
    expect(new Float32Array(await read)).toEqual(want);
    for (const hold of [false, true]) {
      rec = gpu.recorder();
      rec.holdParts = hold;
      rec.replay(tape, []);
      expect(rec.flushes).toBe(hold ? 0 : 2);
      read = rec.read(y);
      await rec.submit();
      expect(new Float32Array(await read)).toEqual(want);
    }
    tape.dispose();
    gpu.release(x, y, t);
    expect(gpu.errors).toEqual([]);
  });

  it("are invalid with a host write or a readback within the capture, and refuse a write to a buffer reused in it", async () => {
    const n = 64;
    const x = gpu.upload(new Float32Array(n).fill(1));
    const y = gpu.buffer(n * 4);
    const live0 = gpu.memory.liveBytes;
    let rec = gpu.recorder();
    rec.capture([]);
    const t = gpu.buffer(n * 4);
    rec.dispatch(scale, [x, t], 1, new Params().u32(n).f32(1));
    gpu.release(t);
    const reused = gpu.buffer(n * 4);
    expect(reused).toBe(t);
    expect(() => gpu.write(reused, new Float32Array(n))).toThrow("reused within a capture");
    const fresh = gpu.upload(new Float32Array(n).fill(2)); // never a buffer released within the capture
    expect(fresh).not.toBe(t);
    rec.dispatch(scale, [fresh, y], 1, new Params().u32(n).f32(1));
    let tape = rec.endCapture();
    expect(tape.invalid).toMatch(/host write/);
    expect(tape.live).toBe(false);
    const other = gpu.recorder();
    expect(() => other.replay(tape, [])).toThrow("invalid");
    other.abandon();
    rec.abandon(); // the recorder does not run: the tape goes with it
    gpu.release(fresh); // the caller's, not the tape's
    expect(gpu.memory.liveBytes).toBe(live0);
    rec = gpu.recorder();
    rec.capture([]);
    rec.dispatch(scale, [x, y], 1, new Params().u32(n).f32(1));
    const read = rec.read(y);
    tape = rec.endCapture();
    expect(tape.invalid).toMatch(/readback/);
    await rec.submit();
    await read;
    tape.dispose();
    gpu.release(x, y);
    expect(gpu.errors).toEqual([]);
  });
});
