import { beforeAll, describe, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { kvcacheWrite } from "../kvcache/index.ts";
import { kvcacheWriteReference } from "../kvcache/reference.ts";
import {
  attentionDecode,
  attentionForward,
  chooseTiles,
  decodeLanes,
  decodeSplit,
  lanesSize,
  lanesTiles,
  lanesWidth,
  tileBytes,
  type DecodeLanes,
  type ForwardOptions,
  type LanesTiles,
  type Tiles,
} from "./index.ts";
import { attentionReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// f32 GPU vs the f64 reference on O(1) inputs: scores and sums of <= 48 terms, error ~1e-6.
const tol = { atol: 1e-5, rtol: 1e-4 };

interface Case {
  h: number;
  kv: number;
  d: number;
  slots: number;
  tmax: number;
  /** Per sequence: [slot, cached tokens, new tokens]; new tokens are laid out one sequence after another. */
  seqs: [number, number, number][];
  /** Sliding window (keys pos - window + 1..pos). */
  window?: number;
}

/** Runs kv write + attention on the GPU and the same on the CPU; the whole cache is random, so rows a token
 *  must not see (later positions, other slots) would show up as errors. */
async function check(
  c: Case,
  opts: ForwardOptions & { decode?: boolean; lanes?: Partial<LanesTiles & DecodeLanes> },
  seed: number,
): Promise<void> {
  const { h, kv, d, slots, tmax } = c;
  const rng = new Rng(seed);
  const sp: number[] = [];
  for (const [s, cached, fresh] of c.seqs) for (let i = 0; i < fresh; i++) sp.push(s, cached + i);
  sp.push(0xffffffff, 0); // a padding token: no keys, o = 0, lse = 0
  const slotPos = Uint32Array.from(sp);
  const n = slotPos.length / 2;
  const q = rng.f32(n * h * d);
  const [k, v] = [rng.f32(n * kv * d), rng.f32(n * kv * d)];
  const [kc, vc] = [rng.f32(slots * tmax * kv * d), rng.f32(slots * tmax * kv * d)];
  const b = {
    q: gpu.upload(q),
    slotPos: gpu.upload(slotPos),
    nk: gpu.upload(k),
    nv: gpu.upload(v),
    k: gpu.upload(kc),
    v: gpu.upload(vc),
    o: gpu.buffer(n * h * d * 4),
    lse: gpu.buffer(n * h * 4),
  };
  const dims = { n, h, kv, d, slots, tmax, window: c.window };
  const rec = gpu.recorder();
  kvcacheWrite(gpu, rec, { slotPos: b.slotPos, k: b.nk, v: b.nv, kc: b.k, vc: b.v }, dims);
  const maxLen = Math.max(...c.seqs.map(([, cached, fresh]) => cached + fresh));
  const used = opts.decode
    ? attentionDecode(gpu, rec, b, { ...dims, maxLen }, opts)
    : attentionForward(gpu, rec, b, dims, opts);
  const [go, gl] = [rec.read(b.o, n * h * d * 4), rec.read(b.lse, n * h * 4)];
  await rec.submit();
  const cache = kvcacheWriteReference(kc, vc, k, v, slotPos, n, kv * d, slots, tmax);
  const ref = attentionReference(q, slotPos, cache.kc, cache.vc, { ...dims, scale: 1 / Math.sqrt(d) });
  const what = `${JSON.stringify(used)}`;
  assertClose(`o ${what}`, new Float32Array(await go), ref.o, tol);
  assertClose(`lse ${what}`, new Float32Array(await gl), ref.lse, tol);
  gpu.release(...Object.values(b));
  expect(gpu.errors).toEqual([]);
  if (opts.split) expect(used.split).toBe(opts.split);
}

// Prefill: slot 0 continues from 5 cached tokens, slot 2 starts fresh, slot 1 continues from 3.
const prefill = (h: number, kv: number, d: number): Case => ({
  h,
  kv,
  d,
  slots: 3,
  tmax: 24,
  seqs: [
    [0, 5, 7],
    [2, 0, 9],
    [1, 3, 2],
  ],
});
// Small tiles: blocks of 3 tokens straddle sequences (one pass per slot), 4-key tiles, heads split across workgroups.
const small: Partial<Tiles> = { bq: 3, gh: 1, bk: 4, wg: 64 };
// "default" is what this device gets (the "cpu" profile on SwiftShader); "gpu" is what real GPUs get.
const tilesFor = (kind: "forward" | "decode", which: string, d: number, g: number): Partial<Tiles> =>
  which === "small" ? small : which === "gpu" ? chooseTiles(gpu, kind, d, g, {}, "gpu") : {};

describe("attention_forward (prefill over a KV cache) vs CPU reference", () => {
  it.each([
    [4, 4, 8, "default"],
    [4, 2, 64, "default"],
    [8, 2, 8, "default"],
    [4, 4, 8, "small"],
    [4, 2, 64, "small"],
    [8, 2, 8, "small"],
    [8, 2, 8, "gpu"],
    [4, 2, 64, "gpu"],
    [4, 2, 6, "default"], // D % 4 == 2: rows are zero-padded to whole vec4 in workgroup memory
    [4, 2, 6, "small"],
    // Each variant explicitly ("default" above is the device's choice: rows on SwiftShader when D % 4 == 0).
    [4, 4, 8, "tiled"],
    [4, 2, 64, "tiled"],
    [4, 4, 8, "rows"],
    [4, 2, 64, "rows"],
    [6, 2, 12, "rows"],
  ] as const)("H=%i KV=%i D=%i tiles=%s", async (h, kv, d, tiles) => {
    const variant = tiles === "default" ? undefined : tiles === "rows" ? "rows" : "tiled";
    await check(prefill(h, kv, d), { tiles: tilesFor("forward", tiles, d, h / kv), variant }, h * 100 + d);
  });

  it("the rows variant refuses D % 4 != 0, naming the variant to use", () => {
    const rec = gpu.recorder();
    const x = gpu.buffer(4096);
    const bufs = { q: x, slotPos: x, k: x, v: x, o: x, lse: x };
    expect(() =>
      attentionForward(gpu, rec, bufs, { n: 2, h: 2, kv: 1, d: 6, slots: 1, tmax: 4 }, { variant: "rows" }),
    ).toThrow(/"rows" variant needs D % 4 == 0; got D=6/);
    gpu.release(x);
  });

  it("many tokens per workgroup with all heads of a group (bq=5, gh=4) and split-KV over a prefill", async () => {
    await check(prefill(8, 2, 8), { tiles: { bq: 5, gh: 4, bk: 8, wg: 64 }, split: 3 }, 7);
  });
});

// The lanes variant (GPUs with subgroups; SwiftShader's are 4 lanes): its default geometry, and small blocks that
// straddle sequences (one pass per slot) with few keys a tile, at 1, 2 and 4 lanes a row and 1 to 8 vec4 a lane.
describe("attention_forward, lanes variant, vs CPU reference", () => {
  it.each([
    [4, 2, 64, {}],
    [14, 2, 64, {}], // Qwen2.5-0.5B's heads: 7 a kv-head
    [4, 2, 128, {}], // 8 vec4 a lane here
    [8, 2, 8, {}],
    [6, 2, 12, {}], // 3 vec4 a lane, one lane a row
    [4, 2, 64, { bq: 3, gh: 1, bk: 4 }],
    [4, 2, 32, { p: 2, bq: 3, gh: 2, bk: 5 }],
    [4, 4, 8, { p: 2, bq: 2, gh: 1, bk: 3 }],
    [4, 2, 64, { p: 1, bq: 5, gh: 2, bk: 8 }],
  ] as const)("H=%i KV=%i D=%i lanes=%j", async (h, kv, d, lanes) => {
    await check(prefill(h, kv, d), { variant: "lanes", lanes }, h * 100 + d + 7);
  });

  it.each([
    [4, 2, 8, 4, {}],
    [4, 2, 64, 1, { bq: 3, gh: 1, bk: 4 }],
    [4, 2, 32, 5, { p: 2, bq: 4, gh: 2, bk: 3 }],
  ] as const)("H=%i KV=%i D=%i window=%i lanes=%j", async (h, kv, d, window, lanes) => {
    await check({ ...prefill(h, kv, d), window }, { variant: "lanes", lanes }, h * 100 + d + window + 7);
  });

  it("geometry: fits this device, and refuses what cannot run, saying why", () => {
    expect(gpu.subgroupMinSize).toBeGreaterThan(0); // the variant runs here
    for (const kind of ["forward", "dq", "dkv"] as const)
      for (const d of [8, 12, 64, 128, 256])
        for (const g of [1, 2, 6, 7, 8]) {
          const t = lanesTiles(gpu, kind, d, g);
          const { wg, bytes } = lanesSize(kind, t, d);
          expect(g % t.gh).toBe(0);
          expect(t.p).toBeLessThanOrEqual(gpu.subgroupMinSize);
          expect(wg).toBeLessThanOrEqual(gpu.limits.maxComputeInvocationsPerWorkgroup);
          expect(bytes).toBeLessThanOrEqual(gpu.limits.maxComputeWorkgroupStorageSize);
        }
    expect(lanesWidth(gpu, 6)).toBeUndefined();
    expect(() => lanesTiles(gpu, "forward", 6, 2)).toThrow(/lanes" forward .* D=6: the device needs subgroups/);
    expect(() => lanesTiles(gpu, "forward", 64, 2, { p: 3 })).toThrow(/lanes 3 must be a power of two/);
    expect(() => lanesTiles(gpu, "forward", 64, 4, { gh: 3 })).toThrow(/gh 3 does not divide H \/ KV = 4/);
    expect(() => lanesTiles(gpu, "forward", 64, 2, { p: 2 * gpu.subgroupMinSize })).toThrow(/smallest subgroup/);
  });
});

// Decode: 5 sequences of lengths 1, 7, 23, 40, 16 (none a multiple of the chunk or tile) in scattered slots.
const decode = (h: number, kv: number, d: number): Case => ({
  h,
  kv,
  d,
  slots: 6,
  tmax: 48,
  seqs: [
    [4, 0, 1],
    [0, 6, 1],
    [5, 22, 1],
    [1, 39, 1],
    [3, 15, 1],
  ],
});

// Sliding window of 4 keys (Gemma 3's local layers, Mistral): cached keys before the window would show up as errors.
describe("attention_forward with a sliding window vs CPU reference", () => {
  it.each([
    [4, 2, 8, 4, "default"],
    [4, 2, 8, 4, "rows"],
    [4, 2, 8, 4, "tiled"],
    [4, 2, 8, 4, "small"],
    [8, 2, 8, 5, "gpu"],
    [4, 2, 64, 1, "rows"],
    [4, 2, 64, 1, "small"],
    [4, 2, 6, 3, "small"],
    [4, 4, 8, 100, "small"], // wider than every sequence: plain causal attention
  ] as const)("H=%i KV=%i D=%i window=%i tiles=%s", async (h, kv, d, window, tiles) => {
    const variant = tiles === "default" ? undefined : tiles === "rows" ? "rows" : "tiled";
    const c = { ...prefill(h, kv, d), window };
    await check(c, { tiles: tilesFor("forward", tiles, d, h / kv), variant }, h * 100 + d + window);
  });

  it("split-KV with a window: chunks wholly before every token's window stay empty", async () => {
    await check({ ...prefill(8, 2, 8), window: 3 }, { tiles: { bq: 5, gh: 4, bk: 4, wg: 64 }, split: 4, chunk: 4 }, 8);
  });

  it("decode with a window, rows and tiled with split", async () => {
    const c = { ...decode(4, 2, 8), window: 6 };
    await check(c, { decode: true, variant: "rows" }, 31);
    await check(c, { decode: true, variant: "tiled", split: 3, chunk: 8, tiles: { bk: 4 } }, 32);
  });

  it("refuses a window that is not a positive integer", () => {
    const rec = gpu.recorder();
    const x = gpu.buffer(4096);
    const bufs = { q: x, slotPos: x, k: x, v: x, o: x, lse: x };
    const dims = { n: 2, h: 2, kv: 1, d: 8, slots: 1, tmax: 4, window: 0 };
    expect(() => attentionForward(gpu, rec, bufs, dims)).toThrow(/window 0 must be a positive integer/);
    gpu.release(x);
  });
});

describe("attention decode (split-KV) vs CPU reference", () => {
  it.each([
    [4, 1, 8, 1, "tiled"],
    [4, 1, 8, 1, "rows"],
    [4, 2, 64, 1, "rows"],
    [4, 1, 8, 3, "tiled"],
    [4, 2, 64, 3, "tiled"],
    [2, 2, 8, 5, "tiled"],
    [4, 2, 10, 2, "tiled"],
  ] as const)("H=%i KV=%i D=%i split=%i %s", async (h, kv, d, split, variant) => {
    await check(decode(h, kv, d), { decode: true, split, variant, tiles: { bk: 8 } }, h * 10 + d + split);
  });

  // The lanes decode kernel: per head, s lanes split the keys and p each row (SwiftShader's subgroups are 4 lanes).
  it.each([
    [4, 2, 64, {}],
    [14, 2, 64, { p: 1, s: 4 }],
    [4, 2, 64, { p: 2, s: 2, gh: 1 }],
    [4, 1, 8, { p: 1, s: 4 }],
    [6, 2, 12, { p: 1, s: 2 }], // 3 vec4 a lane
    [4, 2, 128, { p: 2, s: 2 }], // 16 vec4 a lane
  ] as const)("H=%i KV=%i D=%i lanes=%j", async (h, kv, d, lanes) => {
    await check(decode(h, kv, d), { decode: true, variant: "lanes", lanes }, h * 10 + d + 3);
  });

  it.each([
    [14, 2, 64, 2, undefined, { p: 2, s: 2 }],
    [4, 1, 8, 3, 8, { p: 1, s: 4 }], // chunks shorter than the longest sequence: the last runs to the end
    [4, 2, 64, 5, 9, {}], // chunks wholly past some sequences' keys
  ] as const)("H=%i KV=%i D=%i lanes split=%i chunk=%s %j", async (h, kv, d, split, chunk, lanes) => {
    const o = { decode: true, variant: "lanes", lanes, split, ...(chunk ? { chunk } : {}) } as const;
    await check(decode(h, kv, d), o, h * 10 + d + split);
  });

  it("lanes with a window, and its geometry refused where it cannot run, saying why", async () => {
    await check({ ...decode(4, 2, 8), window: 6 }, { decode: true, variant: "lanes", lanes: { p: 1, s: 4 } }, 33);
    await check({ ...decode(4, 2, 16), window: 1 }, { decode: true, variant: "lanes", lanes: { p: 2, s: 2 } }, 34);
    const split = { decode: true, variant: "lanes", lanes: { p: 1, s: 4 }, split: 3, chunk: 8 } as const;
    await check({ ...decode(4, 2, 8), window: 10 }, split, 35); // chunks wholly before a token's window stay empty
    const sg = gpu.subgroupMinSize;
    expect(decodeLanes(gpu, 64, 7).s * decodeLanes(gpu, 64, 7).p).toBeLessThanOrEqual(sg);
    expect(() => decodeLanes(gpu, 64, 2, { p: 2, s: sg })).toThrow(/lanes exceed the device's smallest subgroup/);
    expect(() => decodeLanes(gpu, 64, 2, { p: 1, s: 3 })).toThrow(/must be powers of two/);
    expect(() => decodeLanes(gpu, 6, 2)).toThrow(/D=6: the device needs subgroups/);
  });

  it("split with chunks shorter than the longest sequence: the last chunk runs to the end", async () => {
    await check(decode(4, 2, 8), { decode: true, split: 3, chunk: 8, tiles: { bk: 4 } }, 5);
  });

  it("this device's default decode (rows on SwiftShader, else tiles and split), 7 heads per kv-head", async () => {
    await check(decode(14, 2, 64), { decode: true }, 99);
  });

  it("real-GPU decode tiles (all 7 heads of a group, 64-key tiles), split=2", async () => {
    await check(decode(14, 2, 8), { decode: true, split: 2, tiles: tilesFor("decode", "gpu", 8, 7) }, 98);
  });

  it("decodeSplit: one chunk for short contexts, more for long ones with few sequences", () => {
    expect(decodeSplit(40, 16)).toBe(1);
    expect(decodeSplit(4096, 4)).toBeGreaterThan(8);
    expect(decodeSplit(4096, 1024)).toBe(1); // enough workgroups already
    expect(decodeSplit(512, 16, { minChunk: 256 })).toBe(2);
  });
});

describe("tile choice", () => {
  it("fits every supported shape on both profiles within this device's limits", () => {
    for (const profile of ["gpu", "cpu"] as const)
      for (const kind of ["forward", "decode", "dq", "dkv"] as const)
        for (const d of [2, 8, 64, 80, 128, 256])
          for (const g of [1, 2, 4, 7, 8, 16]) {
            const t = chooseTiles(gpu, kind, d, g, {}, profile); // throws when something does not fit
            expect(g % t.gh).toBe(0);
            expect(tileBytes(kind, t, d)).toBeLessThanOrEqual(gpu.limits.maxComputeWorkgroupStorageSize);
          }
  });

  it("rejects tiles that do not fit, saying why", () => {
    expect(() => chooseTiles(gpu, "forward", 64, 4, { gh: 3 })).toThrow(/gh 3 does not divide H \/ KV = 4/);
    expect(() => chooseTiles(gpu, "dq", 256, 1, { bq: 32, bk: 64, wg: 64 })).toThrow(/accumulate|workgroup memory/);
  });
});
