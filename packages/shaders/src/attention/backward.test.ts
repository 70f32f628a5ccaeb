import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  attentionBackward,
  attentionForward,
  chooseTiles,
  trainingSlotPos,
  type LanesTiles,
  type Tiles,
} from "./index.ts";
import { attentionBackwardReference, attentionTrainReference, type TrainDims } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// f32 GPU vs f64 reference on O(1) inputs; the gradients sum up to T * H / KV terms of size ~1.
const fwdTol = { atol: 1e-5, rtol: 1e-4 };
const bwdTol = { atol: 3e-5, rtol: 2e-4 };

describe("attention backward CPU reference", () => {
  it("matches central finite differences of the forward reference (f64)", () => {
    const dims: TrainDims = { b: 2, t: 3, h: 2, kv: 1, d: 4, scale: 0.7 };
    const rng = new Rng(1);
    const nq = dims.b * dims.t * dims.h * dims.d;
    const nk = dims.b * dims.t * dims.kv * dims.d;
    const [q, k, v] = [f64(rng.f32(nq)), f64(rng.f32(nk)), f64(rng.f32(nk))];
    const w = f64(rng.f32(nq)); // upstream gradient: loss = sum(o * w)
    const num = finiteDiff(([qq, kk, vv]) => dot(attentionTrainReference(qq, kk, vv, dims).o, w), [q, k, v]);
    const ref = attentionBackwardReference(q, k, v, w, dims);
    const t = { atol: 1e-8, rtol: 1e-6 };
    assertClose("dq", ref.dq, num[0], t);
    assertClose("dk", ref.dk, num[1], t);
    assertClose("dv", ref.dv, num[2], t);
  });

  it("with a sliding window matches central finite differences of the windowed forward (f64)", () => {
    const dims: TrainDims = { b: 2, t: 5, h: 2, kv: 1, d: 4, scale: 0.7, window: 2 };
    const rng = new Rng(2);
    const nq = dims.b * dims.t * dims.h * dims.d;
    const nk = dims.b * dims.t * dims.kv * dims.d;
    const [q, k, v] = [f64(rng.f32(nq)), f64(rng.f32(nk)), f64(rng.f32(nk))];
    const w = f64(rng.f32(nq));
    const num = finiteDiff(([qq, kk, vv]) => dot(attentionTrainReference(qq, kk, vv, dims).o, w), [q, k, v]);
    const ref = attentionBackwardReference(q, k, v, w, dims);
    const t = { atol: 1e-8, rtol: 1e-6 };
    assertClose("dq", ref.dq, num[0], t);
    assertClose("dk", ref.dk, num[1], t);
    assertClose("dv", ref.dv, num[2], t);
    // The window changes the result: without it the forward differs.
    const full = attentionTrainReference(q, k, v, { ...dims, window: undefined }).o;
    const win = attentionTrainReference(q, k, v, dims).o;
    expect(Math.max(...full.map((x, i) => Math.abs(x - win[i])))).toBeGreaterThan(1e-3);
  });
});

// Training layout: T = 13 is not a multiple of any tile; sequences are causal each on its own.
describe("attention forward + backward (training layout) GPU vs CPU reference", () => {
  const small = {
    dq: { bq: 3, gh: 1, bk: 4, wg: 64 },
    dkv: { bk: 5, bq: 2, gh: 1, wg: 64 },
    fwd: { bq: 3, gh: 1, bk: 4, wg: 64 },
  };
  it.each([
    [2, 2, 8, "default"],
    [4, 2, 64, "default"],
    [4, 1, 8, "default"],
    [2, 2, 8, "small"],
    [4, 2, 64, "small"],
    [4, 1, 8, "small"],
    [4, 2, 8, "gpu"],
    [4, 2, 10, "default"], // D % 4 == 2: rows are zero-padded to whole vec4 in workgroup memory
    [2, 1, 6, "small"],
    // Each variant explicitly with its default tiles ("default" above is the device's choice of variant).
    [2, 2, 8, "tiled"],
    [4, 2, 64, "tiled"],
    [2, 2, 8, "rows"],
    [4, 2, 64, "rows"],
    [4, 1, 8, "rows"],
    [6, 2, 12, "rows"],
  ] as const)("H=%i KV=%i D=%i tiles=%s", (h, kv, d, tiles) => run(h, kv, d, tiles));

  // Sliding windows: narrower than a tile, wider than one, a single key, and one wider than the sequence.
  it.each([
    [2, 2, 8, "default", 4],
    [4, 2, 8, "rows", 4],
    [4, 2, 8, "tiled", 4],
    [4, 2, 8, "small", 4],
    [4, 2, 8, "small", 7],
    [4, 1, 8, "gpu", 5],
    [4, 2, 64, "rows", 1],
    [4, 2, 64, "small", 1],
    [2, 1, 6, "small", 3],
    [2, 2, 8, "small", 50],
  ] as const)("H=%i KV=%i D=%i tiles=%s window=%i", (h, kv, d, tiles, window) => run(h, kv, d, tiles, window));

  // The lanes variant (GPUs with subgroups; SwiftShader's are 4 lanes): default geometry (dkv: 4 groups of lanes),
  // and small query blocks, key tiles and key blocks at 1, 2 and 4 lanes a row, 1 to 8 vec4 a lane, heads of a group
  // split over tiles.
  type Lanes = { dq?: Partial<LanesTiles>; dkv?: Partial<LanesTiles> };
  it.each([
    [4, 2, 64, {}],
    [14, 2, 64, {}], // Qwen2.5-0.5B's heads: 7 a kv-head
    [4, 2, 128, {}],
    [4, 1, 8, {}],
    [6, 2, 12, {}],
    [4, 2, 64, { dq: { bq: 3, gh: 1, bk: 4 }, dkv: { bk: 5, bq: 2, gh: 1 } }],
    [4, 2, 32, { dq: { p: 2, bq: 4, gh: 2, bk: 3 }, dkv: { p: 2, bk: 3, bq: 3, gh: 2 } }],
    [8, 2, 64, { dq: { p: 1, bq: 2, gh: 4, bk: 6 }, dkv: { p: 1, bk: 7, bq: 1, gh: 2 } }],
    // dkv's rows split over groups of lanes: 1, 2 and 3 groups (a tile's rows not a multiple of them).
    [4, 2, 64, { dkv: { bk: 5, bq: 3, gh: 2, qg: 1 } }],
    [4, 2, 64, { dkv: { bk: 5, bq: 3, gh: 2, qg: 2 } }],
    [4, 1, 32, { dkv: { p: 2, bk: 4, bq: 2, gh: 2, qg: 3 } }],
  ] as const)("H=%i KV=%i D=%i lanes=%j", (h, kv, d, lanes: Lanes) => run(h, kv, d, "lanes", undefined, lanes));

  it.each([
    [4, 2, 8, 4, {}],
    [4, 2, 64, 1, { dq: { bq: 3, gh: 1, bk: 4 }, dkv: { bk: 5, bq: 2, gh: 1 } }],
    [4, 1, 32, 5, { dq: { p: 2, bq: 4, gh: 2, bk: 3 }, dkv: { p: 2, bk: 3, bq: 3, gh: 2, qg: 3 } }],
  ] as const)("H=%i KV=%i D=%i window=%i lanes=%j", (h, kv, d, window, lanes: Lanes) =>
    run(h, kv, d, "lanes", window, lanes),
  );

  async function run(h: number, kv: number, d: number, tiles: string, window?: number, lanes?: Lanes) {
    const [b, t] = [2, 13];
    const dims: TrainDims = { b, t, h, kv, d, scale: 1 / Math.sqrt(d), window };
    const rng = new Rng(h * 100 + kv * 10 + d);
    const nq = b * t * h * d;
    const nk = b * t * kv * d;
    const [q, k, v, dout] = [rng.f32(nq), rng.f32(nk), rng.f32(nk), rng.f32(nq)];
    const buf = {
      q: gpu.upload(q),
      k: gpu.upload(k),
      v: gpu.upload(v),
      dout: gpu.upload(dout),
      slotPos: gpu.upload(trainingSlotPos(b, t)),
      o: gpu.buffer(nq * 4),
      lse: gpu.buffer(b * t * h * 4),
      dq: gpu.buffer(nq * 4),
      dk: gpu.buffer(nk * 4),
      dv: gpu.buffer(nk * 4),
    };
    // "default": this device's choice of variant and tiles (rows, or the "cpu" tiles, on SwiftShader); "gpu": the
    // tiled kernels with what real GPUs get; "small", "gpu" and "tiled" force the tiled variant, "rows" the other.
    const pick = (kind: "forward" | "dq" | "dkv", x: Partial<Tiles>) =>
      tiles === "small" ? x : tiles === "gpu" ? chooseTiles(gpu, kind, d, h / kv, {}, "gpu") : {};
    const variant = tiles === "default" ? undefined : tiles === "rows" || tiles === "lanes" ? tiles : "tiled";
    const rec = gpu.recorder();
    attentionForward(
      gpu,
      rec,
      buf,
      { n: b * t, h, kv, d, slots: b, tmax: t, window },
      { tiles: pick("forward", small.fwd), variant, lanes: lanes?.dq },
    );
    attentionBackward(
      gpu,
      rec,
      buf,
      { b, t, h, kv, d, window },
      { dqTiles: pick("dq", small.dq), dkvTiles: pick("dkv", small.dkv), variant, lanes },
    );
    const out = [buf.o, buf.lse, buf.dq, buf.dk, buf.dv].map((x, i) => rec.read(x, [nq, b * t * h, nq, nk, nk][i] * 4));
    await rec.submit();
    const [o, lse, dq, dk, dv] = (await Promise.all(out)).map((x) => new Float32Array(x));
    const fwd = attentionTrainReference(q, k, v, dims);
    assertClose("o", o, fwd.o, fwdTol);
    assertClose("lse", lse, fwd.lse, fwdTol);
    const ref = attentionBackwardReference(q, k, v, dout, dims);
    assertClose("dq", dq, ref.dq, bwdTol);
    assertClose("dk", dk, ref.dk, bwdTol);
    assertClose("dv", dv, ref.dv, bwdTol);
    gpu.release(...Object.values(buf));
    expect(gpu.errors).toEqual([]);
  }
});
