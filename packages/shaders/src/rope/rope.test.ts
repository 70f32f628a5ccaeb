import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  ROPE_QKV_LAYOUTS,
  ropeBackward,
  ropeBackwardPack,
  ropeForward,
  ropeInvFreq,
  ropeQkv,
  qkNormBackwardPacked,
  type RopeScaling,
} from "./index.ts";
import { qkNormBackwardPackedReference, ropeQkvReference, ropeReference } from "./reference.ts";
import { rmsnormReference } from "../rmsnorm/reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// Llama 3.2's published rope_scaling, as the engine's config reader (config/config.ts) gives it.
const llama32: RopeScaling = {
  type: "llama3",
  factor: 32,
  highFreqFactor: 4,
  lowFreqFactor: 1,
  originalMaxPositionEmbeddings: 8192,
};

/** (slot, pos) pairs, or plain positions when stride is 1. */
function positions(rng: Rng, n: number, maxPos: number, stride: 1 | 2): Uint32Array {
  const a = new Uint32Array(n * stride);
  for (let t = 0; t < n; t++) {
    if (stride === 2) a[2 * t] = rng.int(4);
    a[t * stride + stride - 1] = rng.int(maxPos + 1);
  }
  return a;
}

async function runGpu(
  x: Float32Array,
  pos: Uint32Array,
  inv: Float32Array,
  n: number,
  heads: number,
  d: number,
  o: { backward: boolean; inplace: boolean; stride: 1 | 2 },
): Promise<Float32Array> {
  const [bx, bp, bi] = [gpu.upload(x), gpu.upload(pos), gpu.upload(inv)];
  const by = o.inplace ? bx : gpu.buffer(x.byteLength);
  const rec = gpu.recorder();
  const dims = { n, heads, d, posStride: o.stride };
  if (o.backward) ropeBackward(gpu, rec, { dy: bx, dx: by, pos: bp, invFreq: bi }, dims);
  else ropeForward(gpu, rec, { x: bx, y: by, pos: bp, invFreq: bi }, dims);
  const out = rec.read(by, x.byteLength);
  await rec.submit();
  gpu.release(bx, bp, bi, ...(o.inplace ? [] : [by]));
  expect(gpu.errors).toEqual([]);
  return new Float32Array(await out);
}

// Inputs in [-1, 1]; the kernel's own sin/cos are within a few f32 ulps (max error measured ~2e-7), so 1e-6 absolute.
const tol = { atol: 1e-6, rtol: 0 };

describe("rope GPU vs CPU reference", () => {
  const cases: [number, number, number, boolean, boolean, 1 | 2][] = [
    // n, heads, d, backward, inplace, posStride
    [5, 3, 8, false, false, 2],
    [5, 3, 8, false, true, 2],
    [7, 2, 64, true, false, 2],
    [7, 2, 64, true, true, 2],
    [300, 3, 8, false, false, 1], // several workgroups, plain positions
  ];
  it.each(cases)(
    "n=%i heads=%i d=%i backward=%s inplace=%s posStride=%i",
    async (n, heads, d, backward, inplace, stride) => {
      const rng = new Rng(n * 100 + d + (backward ? 1 : 0) + (inplace ? 2 : 0));
      const x = rng.f32(n * heads * d);
      const pos = positions(rng, n, 200, stride);
      const inv = ropeInvFreq(d, 10000);
      const y = await runGpu(x, pos, inv, n, heads, d, { backward, inplace, stride });
      assertClose("rope", y, ropeReference(x, pos, inv, n, heads, d, backward ? -1 : 1, stride), tol);
    },
  );

  it("large positions with Llama-3 scaled frequencies (angle range reduction)", async () => {
    const [n, heads, d] = [9, 2, 64];
    const rng = new Rng(9);
    const x = rng.f32(n * heads * d);
    const pos = positions(rng, n, 60_000, 2);
    const inv = ropeInvFreq(d, 500_000, llama32);
    const y = await runGpu(x, pos, inv, n, heads, d, { backward: false, inplace: false, stride: 2 });
    // pos * invFreq is rounded to f32 on both sides; reducing angles up to 6e4 costs at most a few 1e-7.
    assertClose("rope large pos", y, ropeReference(x, pos, inv, n, heads, d), { atol: 2e-6, rtol: 0 });
  });
});

describe("rope CPU reference", () => {
  it("backward matches central finite differences of the forward (f64)", () => {
    const [n, heads, d] = [3, 2, 6];
    const rng = new Rng(3);
    const x = f64(rng.f32(n * heads * d));
    const w = f64(rng.f32(n * heads * d));
    const pos = positions(rng, n, 50, 2);
    const inv = ropeInvFreq(d, 10000);
    const [num] = finiteDiff(([xx]) => dot(ropeReference(xx, pos, inv, n, heads, d), w), [x]);
    assertClose("drope", ropeReference(w, pos, inv, n, heads, d, -1), num, { atol: 1e-8, rtol: 1e-6 });
  });

  it("backward undoes forward (rotation is orthogonal)", () => {
    const rng = new Rng(4);
    const x = rng.f32(2 * 3 * 8);
    const pos = positions(rng, 2, 1000, 2);
    const inv = ropeInvFreq(8, 10000);
    const back = ropeReference(ropeReference(x, pos, inv, 2, 3, 8), pos, inv, 2, 3, 8, -1);
    assertClose("roundtrip", back, x, { atol: 1e-12, rtol: 0 });
  });
});

describe("rope inverse frequencies", () => {
  it("default: theta^(-2i/D), decreasing from 1", () => {
    const inv = ropeInvFreq(64, 10000);
    expect(inv[0]).toBe(1);
    for (let i = 1; i < 32; i++) {
      expect(inv[i]).toBeLessThan(inv[i - 1]);
      expect(inv[i] / inv[i - 1]).toBeCloseTo(10000 ** (-2 / 64), 6);
    }
  });

  it("llama3: keeps high, slows low (by factor), blends the band between", () => {
    const s = llama32;
    expect(s).toEqual({
      type: "llama3",
      factor: 32,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    });
    const base = ropeInvFreq(64, 500_000);
    const scaled = ropeInvFreq(64, 500_000, s);
    const kinds = new Set<string>();
    let prevRatio = 1;
    for (let i = 0; i < 32; i++) {
      const wavelen = (2 * Math.PI) / base[i];
      const ratio = scaled[i] / base[i];
      if (wavelen < 8192 / 4) {
        kinds.add("high");
        expect(ratio).toBeCloseTo(1, 6);
      } else if (wavelen > 8192 / 1) {
        kinds.add("low");
        expect(ratio).toBeCloseTo(1 / 32, 6);
      } else {
        kinds.add("mid");
        expect(ratio).toBeLessThan(1);
        expect(ratio).toBeGreaterThan(1 / 32);
      }
      expect(ratio).toBeLessThanOrEqual(prevRatio + 1e-7); // lower frequencies are scaled down more
      prevRatio = ratio;
    }
    expect([...kinds].sort()).toEqual(["high", "low", "mid"]);
  });

  it("linear: every frequency divided by factor (Gemma 3's global layers)", () => {
    const base = ropeInvFreq(16, 1_000_000);
    const scaled = ropeInvFreq(16, 1_000_000, { type: "linear", factor: 8 });
    for (let i = 0; i < 8; i++) expect(scaled[i]).toBe(Math.fround(base[i] / 8));
  });
});

describe.each(ROPE_QKV_LAYOUTS)(
  "ropeQkv, %s layout (per-head norm, RoPE, KV-cache write) vs the composed CPU references",
  (layout) => {
    it.each([
      // n, h, kv, d, extra columns in a packed row, per-head norm
      [1, 3, 1, 32, 0, false],
      [4, 4, 2, 8, 5, true],
      [8, 14, 2, 64, 0, false],
      [70, 2, 1, 16, 3, true], // several workgroups
      [3, 2, 1, 256, 0, true], // the gpu layout's threads take two pairs of a row each
    ] as const)("n=%i h=%i kv=%i d=%i (+%i columns, norm %s)", async (n, h, kv, d, extra, norm) => {
      const rng = new Rng(n * 100 + d);
      const [slots, tmax] = [3, 2 * Math.ceil(n / 3) + 4];
      const ldq = (h + 2 * kv) * d + extra;
      const qkv = rng.f32(n * ldq);
      // Distinct (slot, pos) per token (as the scheduler's are), the positions spread over the cache.
      const sp = new Uint32Array(2 * n);
      for (let t = 0; t < n; t++) [sp[2 * t], sp[2 * t + 1]] = [t % slots, 2 * Math.floor(t / slots) + (t % 2)];
      sp[0] = 0xffffffff; // a padding token: q only
      if (n > 2) sp[3] = tmax; // a position past the cache: q only
      const inv = ropeInvFreq(d, 10000, llama32);
      const cache = slots * tmax * kv * d;
      const [kc, vc] = [rng.f32(cache), rng.f32(cache)];
      const nw = norm ? { q: rng.f32(d, 0.5, 1.5), k: rng.f32(d, 0.5, 1.5), eps: 1e-6 } : undefined;
      const up = (a: ArrayBufferView) => gpu.upload(a);
      const b = {
        qkv: up(qkv),
        slotPos: up(sp),
        invFreq: up(inv),
        q: gpu.buffer(n * h * d * 4),
        kc: up(kc),
        vc: up(vc),
        norm: nw && { q: up(nw.q), k: up(nw.k), eps: nw.eps },
      };
      const rec = gpu.recorder();
      expect(ropeQkv(gpu, rec, b, { n, h, kv, d, ldq, slots, tmax }, { layout })).toBe(layout);
      expect(rec.dispatches).toBe(1);
      const reads = [rec.read(b.q, n * h * d * 4), rec.read(b.kc, cache * 4), rec.read(b.vc, cache * 4)];
      await rec.submit();
      const [q, k, v] = (await Promise.all(reads)).map((a) => new Float32Array(a));
      gpu.release(b.qkv, b.slotPos, b.invFreq, b.q, b.kc, b.vc, b.norm?.q, b.norm?.k);
      const want = ropeQkvReference(qkv, sp, inv, kc, vc, { n, h, kv, d, ldq, slots, tmax }, nw);
      // The norm's rstd adds a few ulps to RoPE's 1e-6 on inputs in [-1, 1] (normed rows reach ~4 here).
      const t = norm ? { atol: 1e-5, rtol: 1e-5 } : tol;
      assertClose("q", q, want.q, t);
      assertClose("k cache", k, want.kc, t);
      assertClose("v cache", v, want.vc, { atol: 0, rtol: 0 });
      expect(gpu.errors).toEqual([]);
    });
  },
);

describe("ropeBackwardPack (training's backward of ropeQkv, packed for one matmul) vs the CPU reference", () => {
  it.each([
    // n, h, kv, d, extra columns in a packed row
    [1, 2, 1, 8, 0],
    [6, 4, 2, 16, 3],
    [40, 14, 2, 64, 0],
  ] as const)("n=%i h=%i kv=%i d=%i (+%i columns)", async (n, h, kv, d, extra) => {
    const rng = new Rng(n * 7 + d);
    const ldq = (h + 2 * kv) * d + extra;
    const [dq, dk, dv] = [rng.f32(n * h * d), rng.f32(n * kv * d), rng.f32(n * kv * d)];
    const sp = new Uint32Array(2 * n);
    for (let t = 0; t < n; t++) [sp[2 * t], sp[2 * t + 1]] = [t % 3, 5 * t + 1]; // (sequence, position)
    const inv = ropeInvFreq(d, 10000, llama32);
    const init = rng.f32(n * ldq); // the extra columns stay as they were
    const b = {
      dq: gpu.upload(dq),
      dk: gpu.upload(dk),
      dv: gpu.upload(dv),
      slotPos: gpu.upload(sp),
      invFreq: gpu.upload(inv),
      dqkv: gpu.upload(init),
    };
    const rec = gpu.recorder();
    ropeBackwardPack(gpu, rec, b, { n, h, kv, d, ldq });
    expect(rec.dispatches).toBe(1);
    const read = rec.read(b.dqkv, n * ldq * 4);
    await rec.submit();
    const got = new Float32Array(await read);
    gpu.release(...Object.values(b));
    const q = ropeReference(dq, sp, inv, n, h, d, -1);
    const k = ropeReference(dk, sp, inv, n, kv, d, -1);
    const want = Float64Array.from(init);
    for (let t = 0; t < n; t++) {
      want.set(q.subarray(t * h * d, (t + 1) * h * d), t * ldq);
      want.set(k.subarray(t * kv * d, (t + 1) * kv * d), t * ldq + h * d);
      want.set(dv.subarray(t * kv * d, (t + 1) * kv * d), t * ldq + (h + kv) * d);
    }
    assertClose("dqkv", got, want, tol);
    expect(gpu.errors).toEqual([]);
  });
});

describe("qkNormBackwardPacked (training's backward of ropeQkv's per-head q/k norms, in place on packed rows)", () => {
  it("CPU reference: rope_backward_pack then it give the finite differences of ropeQkv's forward (f64)", () => {
    const [n, h, kv, d, extra] = [2, 2, 1, 6, 1];
    const ldq = (h + 2 * kv) * d + extra;
    const rng = new Rng(8);
    const qkv = f64(rng.f32(n * ldq));
    const pos = positions(rng, n, 50, 2);
    const inv = ropeInvFreq(d, 10000);
    const norm = { q: f64(rng.f32(d, 0.5, 1.5)), k: f64(rng.f32(d, 0.5, 1.5)), eps: 1e-6 };
    const [wq, wk, wv] = [f64(rng.f32(n * h * d)), f64(rng.f32(n * kv * d)), f64(rng.f32(n * kv * d))];
    const part = (x: ArrayLike<number>, col: number, heads: number) => {
      const out = new Float64Array(n * heads * d);
      for (let t = 0; t < n; t++) for (let e = 0; e < heads * d; e++) out[t * heads * d + e] = x[t * ldq + col + e];
      return out;
    };
    // f(qkv) = wq·rope(norm(q)) + wk·rope(norm(k)) + wv·v, as ropeQkv computes q, k and v.
    const f = (x: Float64Array) => {
      const q = rmsnormReference(part(x, 0, h), norm.q, n * h, d, norm.eps, Float64Array).y;
      const k = rmsnormReference(part(x, h * d, kv), norm.k, n * kv, d, norm.eps, Float64Array).y;
      const v = part(x, (h + kv) * d, kv);
      return dot(ropeReference(q, pos, inv, n, h, d), wq) + dot(ropeReference(k, pos, inv, n, kv, d), wk) + dot(v, wv);
    };
    const [num] = finiteDiff(([x]) => f(x), [qkv]);
    // Backward: rope_backward_pack's packed rows (the extra column's gradient is 0), then the norms'.
    const packed = new Float64Array(n * ldq);
    const [q, k] = [ropeReference(wq, pos, inv, n, h, d, -1), ropeReference(wk, pos, inv, n, kv, d, -1)];
    for (let t = 0; t < n; t++) {
      packed.set(q.subarray(t * h * d, (t + 1) * h * d), t * ldq);
      packed.set(k.subarray(t * kv * d, (t + 1) * kv * d), t * ldq + h * d);
      packed.set(wv.subarray(t * kv * d, (t + 1) * kv * d), t * ldq + (h + kv) * d);
    }
    const got = qkNormBackwardPackedReference(qkv, packed, norm, { n, h, kv, d, ldq });
    assertClose("dqkv", got, num, { atol: 1e-5, rtol: 1e-4 }); // (rmsnormBackwardReference: f32 results)
  });

  describe.each(ROPE_QKV_LAYOUTS)("%s layout vs the CPU reference", (layout) => {
    it.each([
      // n, h, kv, d, extra columns in a packed row
      [1, 2, 1, 8, 0],
      [5, 4, 2, 16, 3],
      [70, 3, 1, 32, 0], // several workgroups in either layout
      [3, 2, 1, 256, 0], // the gpu layout's threads take four elements of a row each
    ] as const)("n=%i h=%i kv=%i d=%i (+%i columns)", async (n, h, kv, d, extra) => {
      const rng = new Rng(n * 31 + d);
      const ldq = (h + 2 * kv) * d + extra;
      const qkv = rng.f32(n * ldq);
      const dqkv = rng.f32(n * ldq);
      const norm = { q: rng.f32(d, 0.5, 1.5), k: rng.f32(d, 0.5, 1.5), eps: 1e-6 };
      const b = {
        qkv: gpu.upload(qkv),
        dqkv: gpu.upload(dqkv),
        norm: { q: gpu.upload(norm.q), k: gpu.upload(norm.k), eps: norm.eps },
      };
      const rec = gpu.recorder();
      expect(qkNormBackwardPacked(gpu, rec, b, { n, h, kv, d, ldq }, { layout })).toBe(layout);
      expect(rec.dispatches).toBe(1);
      const read = rec.read(b.dqkv, n * ldq * 4);
      await rec.submit();
      const got = new Float32Array(await read);
      gpu.release(b.qkv, b.dqkv, b.norm.q, b.norm.k);
      const want = qkNormBackwardPackedReference(qkv, dqkv, norm, { n, h, kv, d, ldq });
      assertClose("dqkv", got, want, { atol: 1e-5, rtol: 1e-5 });
      // The v heads and the columns past them are untouched, bit for bit.
      for (let t = 0; t < n; t++)
        for (let e = (h + kv) * d; e < ldq; e++) expect(got[t * ldq + e]).toBe(dqkv[t * ldq + e]);
      expect(gpu.errors).toEqual([]);
    });
  });
});
