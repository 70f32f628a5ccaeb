import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, packHalf, Rng, roundHalf } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  LORA_TILING_CPU,
  LORA_TILING_GPU,
  loraBackward,
  loraBackwardGroup,
  loraForward,
  loraForwardGroup,
  loraMerge,
  type LoraDims,
  type LoraProduct,
  type LoraTiling,
} from "./index.ts";
import { loraBackwardReference, loraMergeReference, loraReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// f32 sums over up to ~900 terms of products of O(1) values, in another order than the CPU loops.
const TOL = { atol: 2e-5, rtol: 1e-4 };

type Tilings = Partial<Record<LoraProduct, LoraTiling>>;
const ALL = (t: LoraTiling): Tilings => ({ shrink: t, expand: t, grad: t });

/** Runs forward and backward on the GPU with A, B, dA, dB at odd offsets among other adapters' values. */
async function check(
  g: Gpu,
  d: LoraDims,
  tiling: Tilings,
  accumulate: boolean,
  seed: number,
  /** y and dy as columns [off, off + out) of rows `ld` wide (a gate|up product). */
  wide?: { ld: number; off: number },
) {
  const { N, R } = d;
  const rng = new Rng(seed);
  const x = rng.f32(N * d.in);
  const A = rng.f32(R * d.in);
  const B = rng.f32(d.out * R);
  const y0 = rng.f32(N * d.out); // the base weight's output
  const dy = rng.f32(N * d.out);
  const dx0 = rng.f32(N * d.in); // the base weight's input gradient
  const a = 3 + rng.int(100); // flat layout: [pad | A | pad | B | pad]
  const bOff = a + A.length + 5;
  const flat = rng.f32(bOff + B.length + 7);
  flat.set(A, a);
  flat.set(B, bOff);
  const grads0 = rng.f32(flat.length); // other micro-batches' (and other adapters') gradients
  const ld = wide?.ld ?? d.out;
  const off = wide?.off ?? 0;
  // y and dy inside rows of ld (the other columns random: y's must stay as they were).
  const [yWide, dyWide] = [rng.f32(N * ld), rng.f32(N * ld)];
  for (let n = 0; n < N; n++) {
    yWide.set(y0.subarray(n * d.out, (n + 1) * d.out), n * ld + off);
    dyWide.set(dy.subarray(n * d.out, (n + 1) * d.out), n * ld + off);
  }
  const [bx, bparams, bgrads, by, bdy, bdx] = [x, flat, grads0, yWide, dyWide, dx0].map((v) => g.upload(v));
  const bt = g.buffer(N * R * 4);
  const rec = g.recorder();
  const w = { buffer: bparams, a, b: bOff };
  const gs = { buffer: bgrads, a, b: bOff };
  const strided = wide ? { ldy: ld, offsetY: off } : {};
  loraForward(g, rec, { slot: w, x: bx, t: bt, y: by, ...strided }, d, { tiling });
  // The overwrite case also brings its own dt scratch buffer; the others take one from the pool.
  const bdt = accumulate ? undefined : g.buffer(N * R * 4);
  const dyAt = wide ? { lddy: ld, offsetDy: off } : {};
  const bb = { slot: w, grads: gs, x: bx, t: bt, dy: bdy, dx: bdx, dt: bdt, ...dyAt };
  loraBackward(g, rec, bb, d, { tiling, accumulate });
  const reads = [bt, by, bgrads, bdx].map((buf, i) => rec.read(buf, [N * R, N * ld, flat.length, N * d.in][i] * 4));
  await rec.submit();
  const [t, yGot, grads, dx] = (await Promise.all(reads)).map((v) => new Float32Array(v));
  const y = new Float32Array(N * d.out);
  for (let n = 0; n < N; n++) {
    y.set(yGot.subarray(n * ld + off, n * ld + off + d.out), n * d.out);
    for (let j = 0; j < ld; j++)
      if (j < off || j >= off + d.out) expect(yGot[n * ld + j], `y column ${j}`).toBe(yWide[n * ld + j]);
  }
  const ref = loraReference(d, x, A, B, y0);
  const bref = loraBackwardReference(d, x, A, B, ref.t, dy);
  const eGrads = grads0.slice();
  bref.dA.forEach((v, i) => (eGrads[a + i] = (accumulate ? grads0[a + i] : 0) + v));
  bref.dB.forEach((v, i) => (eGrads[bOff + i] = (accumulate ? grads0[bOff + i] : 0) + v));
  assertClose("t", t, ref.t, TOL);
  assertClose("y", y, ref.y, TOL);
  assertClose("dA, dB (and untouched neighbours)", grads, eGrads, TOL);
  assertClose(
    "dx",
    dx,
    dx0.map((v, i) => v + bref.dx[i]),
    TOL,
  );
  g.release(bx, bparams, bgrads, by, bdy, bdx, bt, bdt);
  expect(g.errors).toEqual([]);
}

const dims = (N: number, inF: number, out: number, R: number): LoraDims => ({ N, in: inF, out, R, scale: 16 / R });

// [N, in, out, R]: sizes off every tile, R = 1, 8, 16, and a C ~ 900 layer.
it.each([
  [1, 1, 1, 1],
  [5, 33, 17, 1],
  [7, 37, 29, 8],
  [13, 100, 70, 16],
  [6, 897, 65, 8],
])("lora N=%i in=%i out=%i R=%i matches the CPU reference (GPU and CPU presets)", async (N, inF, out, R) => {
  await check(gpu, dims(N, inF, out, R), LORA_TILING_GPU, true, N * 7 + R);
  await check(gpu, dims(N, inF, out, R), LORA_TILING_CPU, true, N * 7 + R + 1);
});

// Other workgroup shapes, each used for all six products: none split k (SwiftShader-friendly), and
// mixes of threads along i, j and k with 1..4 rows per thread.
it.each([
  [{ WI: 1, WJ: 1, WK: 1, TM: 1 }],
  [{ WI: 1, WJ: 4, WK: 1, TM: 4 }],
  [{ WI: 4, WJ: 2, WK: 4, TM: 3 }],
  [{ WI: 2, WJ: 8, WK: 16, TM: 2 }],
  [{ WI: 1, WJ: 1, WK: 32, TM: 4 }],
  // k split over workgroups (partial sums, then lora_reduce): chunks that do and do not divide k
  [{ WI: 4, WJ: 2, WK: 2, TM: 2, KC: 4 }],
  [{ WI: 2, WJ: 1, WK: 1, TM: 3, KC: 3 }],
])("lora with tiling %o matches the CPU reference", async (t) => {
  await check(gpu, dims(9, 41, 23, 5), ALL(t), true, t.WI + t.WJ * 3 + t.WK * 7);
});

it("lora's GPU gradients split N over workgroups by 128 tokens (partial sums added in order)", async () => {
  expect(LORA_TILING_GPU.grad.KC).toBe(128);
  const rec = gpu.recorder();
  const N = 300; // 3 splits, the last of 44 tokens
  const d = dims(N, 24, 40, 8);
  const [w, g] = [gpu.buffer(2 * 8 * 64 * 4), gpu.buffer(2 * 8 * 64 * 4)];
  const [x, t, dy, dx] = [
    gpu.buffer(N * 24 * 4),
    gpu.buffer(N * 8 * 4),
    gpu.buffer(N * 40 * 4),
    gpu.buffer(N * 24 * 4),
  ];
  const slot = { buffer: w, a: 0, b: 8 * 24 };
  loraBackward(gpu, rec, { slot, grads: { ...slot, buffer: g }, x, t, dy, dx }, d, { layout: "gpu" });
  expect(rec.dispatches).toBe(6); // dt, dB and its reduce, dA and its reduce, dx
  rec.abandon();
  gpu.release(w, g, x, t, dy, dx);
  await check(gpu, d, LORA_TILING_GPU, true, 301);
  await check(gpu, dims(257, 33, 9, 3), LORA_TILING_GPU, false, 302);
});

it("lora's y and dy can be a column range of wider rows (the up half of a gate|up product)", async () => {
  await check(gpu, dims(7, 37, 29, 8), LORA_TILING_GPU, true, 401, { ld: 58, off: 29 });
  await check(gpu, dims(7, 37, 29, 8), LORA_TILING_CPU, true, 402, { ld: 60, off: 0 });
  await check(gpu, dims(300, 24, 16, 8), LORA_TILING_GPU, true, 403, { ld: 32, off: 16 }); // split sums
});

it("lora backward can overwrite dA and dB instead of accumulating", async () => {
  await check(gpu, dims(4, 19, 11, 3), {}, false, 77);
});

it("lora binds aligned windows of a flat buffer larger than one storage binding", async () => {
  const small = await getDevice({ limitOverrides: { maxStorageBufferBindingSize: 1024 } });
  // A and B sit 4 KB into an 8 KB buffer, so they are reached through offset windows.
  const d = dims(3, 20, 12, 4);
  const { N, R } = d;
  const rng = new Rng(5);
  const [x, A, B, dy] = [rng.f32(N * d.in), rng.f32(R * d.in), rng.f32(d.out * R), rng.f32(N * d.out)];
  const flat = rng.f32(2048);
  const [a, b] = [1001, 1499];
  flat.set(A, a);
  flat.set(B, b);
  const [bx, bp, bg, by, bdy] = [x, flat, new Float32Array(2048), new Float32Array(N * d.out), dy].map((v) =>
    small.upload(v),
  );
  const bt = small.buffer(N * R * 4);
  const rec = small.recorder();
  loraForward(small, rec, { slot: { buffer: bp, a, b }, x: bx, t: bt, y: by }, d);
  loraBackward(small, rec, { slot: { buffer: bp, a, b }, grads: { buffer: bg, a, b }, x: bx, t: bt, dy: bdy }, d);
  const [y, grads] = [rec.read(by, N * d.out * 4), rec.read(bg)];
  await rec.submit();
  const ref = loraReference(d, x, A, B);
  const bref = loraBackwardReference(d, x, A, B, ref.t, dy);
  const g = new Float32Array(await grads);
  assertClose("y", new Float32Array(await y), ref.y, TOL);
  assertClose("dA", g.subarray(a, a + A.length), bref.dA, TOL);
  assertClose("dB", g.subarray(b, b + B.length), bref.dB, TOL);
  small.release(bx, bp, bg, by, bdy, bt);
  expect(small.errors).toEqual([]);
});

it("lora backward reference matches finite differences (f64)", () => {
  const d = dims(3, 4, 5, 2);
  const rng = new Rng(21);
  const [x, A, B, dy] = [rng.f32(12), rng.f32(8), rng.f32(10), rng.f32(15)];
  const loss = (v: Float64Array[]) => dot(loraReference(d, v[0], v[1], v[2], undefined, Float64Array).y, dy);
  const [fx, fA, fB] = finiteDiff(loss, [f64(x), f64(A), f64(B)]);
  const { t } = loraReference(d, x, A, B);
  const ref = loraBackwardReference(d, x, A, B, t, dy);
  // f32 analytic gradients (with scale 8) vs f64 differences.
  const tol = { atol: 1e-5, rtol: 1e-5 };
  assertClose("dx vs finite diff", ref.dx, fx, tol);
  assertClose("dA vs finite diff", ref.dA, fA, tol);
  assertClose("dB vs finite diff", ref.dB, fB, tol);
});

/**
 * Adapters that share an input (q, k, v with ranks and widths of their own), as a group: y's and dy's columns side
 * by side, each t in its columns of one buffer. Against each adapter on its own (the path the tests above check
 * against the CPU): the same products, so the same sums; and fewer dispatches.
 */
// Backward dispatches: dt, dB (and its sums of split partials), dA (likewise), then dx a target. Each alone: 6 or 4.
it.each([
  ["gpu", LORA_TILING_GPU, 300, 1 + 2 + 2 + 3],
  ["cpu", LORA_TILING_CPU, 9, 1 + 1 + 1 + 3],
] as const)("a group of adapters sharing x gives each one's results alone (%s tiling)", async (_, tiling, N, back) => {
  const rng = new Rng(N);
  const inF = 24;
  const targets = [
    { out: 16, R: 4 },
    { out: 8, R: 2 },
    { out: 8, R: 3 },
  ];
  const ldy = targets.reduce((s, e) => s + e.out, 0);
  const ldt = targets.reduce((s, e) => s + e.R, 0) + 1; // a spare column: t's row may be wider
  // The flat adapter: each A (R, in) then B (out, R), at odd offsets.
  let at = 5;
  const slots = targets.map((e) => {
    const s = { a: at, b: at + e.R * inF + 3 };
    at = s.b + e.out * e.R + 2;
    return s;
  });
  const flat = rng.f32(at);
  const [x, y0, dy, dx0, g0] = [N * inF, N * ldy, N * ldy, N * inF, at].map((n) => rng.f32(n));
  const run = async (grouped: boolean) => {
    const [bx, bw, bg, by, bdy, bdx] = [x, flat, g0, y0, dy, dx0].map((v) => gpu.upload(v));
    const bt = gpu.buffer(N * ldt * 4);
    const rec = gpu.recorder();
    let col = 0;
    let off = 0;
    const group = targets.map((e, i) => {
      const g = { ...e, scale: 2 / e.R, slot: { buffer: bw, ...slots[i] }, grads: { buffer: bg, ...slots[i] } };
      const r = { ...g, offsetY: off, tCol: col };
      [col, off] = [col + e.R, off + e.out];
      return r;
    });
    if (grouped) {
      loraForwardGroup(gpu, rec, { x: bx, t: bt, ldt, y: by, ldy }, { N, in: inF }, group, { tiling });
      const fwd = rec.dispatches;
      loraBackwardGroup(gpu, rec, { x: bx, t: bt, ldt, dy: bdy, lddy: ldy, dx: bdx }, { N, in: inF }, group, {
        tiling,
      });
      expect([fwd, rec.dispatches - fwd]).toEqual([2, back]);
    } else {
      // Each alone, its t in its own buffer; the same columns of y, dy.
      for (const e of group) {
        const t = gpu.buffer(N * e.R * 4);
        const dims = { N, in: inF, out: e.out, R: e.R, scale: e.scale };
        loraForward(gpu, rec, { slot: e.slot, x: bx, t, y: by, ldy, offsetY: e.offsetY }, dims, { tiling });
        const bb = { slot: e.slot, grads: e.grads, x: bx, t, dy: bdy, lddy: ldy, offsetDy: e.offsetY, dx: bdx };
        loraBackward(gpu, rec, bb, dims, { tiling });
        gpu.release(t);
      }
    }
    const reads = [by, bg, bdx].map((b, i) => rec.read(b, [N * ldy, at, N * inF][i] * 4));
    await rec.submit();
    const out = (await Promise.all(reads)).map((v) => new Float32Array(v));
    gpu.release(bx, bw, bg, by, bdy, bdx, bt);
    return out;
  };
  const [yG, gG, dxG] = await run(true);
  const [yS, gS, dxS] = await run(false);
  const same = { atol: 1e-6, rtol: 1e-6 }; // dx sums the targets' terms in the same order; the rest is per target
  assertClose("y", yG, yS, same);
  assertClose("dA, dB", gG, gS, same);
  assertClose("dx", dxG, dxS, same);
  expect(gpu.errors).toEqual([]);
});

it("loraMerge: W + s·B·A into the merged buffer at W's offset, the rest of it untouched; 16-bit W into f32", async () => {
  const rng = new Rng(31);
  for (const [rows, cols, rank] of [
    [7, 5, 1],
    [96, 64, 8],
    [33, 130, 3],
  ]) {
    const offW = 64 + rows; // odd offsets, as a weight group's members sit
    const [a, b] = [5, 11 + rank * cols];
    const W = rng.f32(offW + rows * cols + 9);
    const params = rng.f32(b + rows * rank + 2);
    const before = rng.f32(W.length);
    const [bw, bp, bm] = [gpu.upload(W), gpu.upload(params), gpu.upload(before)];
    const rec = gpu.recorder();
    loraMerge(gpu, rec, { w: bw, params: bp, merged: bm }, { rows, cols, rank, offsetW: offW, a, b, scale: 0.75 });
    const out = rec.read(bm, before.byteLength);
    await rec.submit();
    const got = new Float32Array(await out);
    const A = params.subarray(a, a + rank * cols);
    const B = params.subarray(b, b + rows * rank);
    const want = loraMergeReference(
      { out: rows, in: cols, R: rank, scale: 0.75 },
      W.subarray(offW, offW + rows * cols),
      A,
      B,
    );
    assertClose(`merge ${rows}x${cols} r${rank}`, got.subarray(offW, offW + rows * cols), want, TOL);
    expect(Array.from(got.subarray(0, offW))).toEqual(Array.from(before.subarray(0, offW)));
    expect(Array.from(got.subarray(offW + rows * cols))).toEqual(Array.from(before.subarray(offW + rows * cols)));
    gpu.release(bw, bp, bm);
  }
  // 16-bit weights into an f32 copy, at odd element offsets (either half of a u32); rank 0 converts W alone.
  for (const kind of ["bf16", "f16"] as const) {
    for (const [rows, cols, rank, offW] of [
      [7, 5, 2, 3],
      [33, 130, 3, 128],
      [9, 11, 0, 17],
    ]) {
      const [a, b] = [3, 4 + rank * cols];
      const W = roundHalf(rng.f32(offW + rows * cols + 5, -2, 2), kind);
      const params = rng.f32(b + rows * rank + 2);
      const before = rng.f32(W.length);
      const [bw, bp, bm] = [gpu.upload(packHalf(W, kind)), gpu.upload(params), gpu.upload(before)];
      const rec = gpu.recorder();
      const d = { rows, cols, rank, offsetW: offW, a, b, scale: 0.5, wDtype: kind };
      loraMerge(gpu, rec, { w: bw, params: bp, merged: bm }, d);
      const out = rec.read(bm, before.byteLength);
      await rec.submit();
      const got = new Float32Array(await out);
      const want = loraMergeReference(
        { out: rows, in: cols, R: rank, scale: 0.5 },
        W.subarray(offW, offW + rows * cols),
        params.subarray(a, a + rank * cols),
        params.subarray(b, b + rows * rank),
      );
      const at = `${kind} merge ${rows}x${cols} r${rank} at ${offW}`;
      if (rank === 0) expect(Array.from(got.subarray(offW, offW + rows * cols)), at).toEqual(Array.from(want));
      else assertClose(at, got.subarray(offW, offW + rows * cols), want, TOL);
      expect(Array.from(got.subarray(0, offW))).toEqual(Array.from(before.subarray(0, offW)));
      expect(Array.from(got.subarray(offW + rows * cols))).toEqual(Array.from(before.subarray(offW + rows * cols)));
      gpu.release(bw, bp, bm);
    }
  }
  const [w, p] = [gpu.buffer(64), gpu.buffer(64)];
  const rec = gpu.recorder();
  const d = { rows: 4, cols: 4, rank: 1, offsetW: 0, a: 0, b: 4, scale: 1 };
  // A 16-bit weight of 4x4 needs 32 bytes, its f32 copy 64.
  expect(() => loraMerge(gpu, rec, { w: gpu.buffer(16), params: p, merged: w }, { ...d, wDtype: "bf16" })).toThrow(
    /weight needs 32 bytes/,
  );
  expect(() => loraMerge(gpu, rec, { w, params: p, merged: w }, d)).toThrow(/must not alias/);
  expect(() => loraMerge(gpu, rec, { w, params: p, merged: gpu.buffer(32) }, d)).toThrow(
    /merged weight needs 64 bytes/,
  );
  expect(() => loraMerge(gpu, rec, { w, params: p, merged: gpu.buffer(64) }, { ...d, b: 13 })).toThrow(/B needs 68/);
  rec.abandon();
});
