import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng, packHalf, roundHalf } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  allocTable,
  embeddingBackward,
  embeddingForward,
  embeddingShard,
  releaseTable,
  splitRows,
  tableViews,
  uploadTable,
  type EmbeddingDtype,
  type EmbeddingTable,
} from "./index.ts";
import { embeddingBackwardReference, embeddingReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

const EXACT = { atol: 0, rtol: 0 }; // a lookup copies values: 16-bit unpacking is exact too
const SENTINEL = -12345;

function randomIds(rng: Rng, N: number, V: number): Uint32Array {
  const ids = Uint32Array.from({ length: N }, () => rng.int(V));
  ids[0] = V - 1; // both ends of the table, and repeats (N > V or birthday collisions)
  if (N > 1) ids[1] = 0;
  if (N > 2) ids[2] = ids[0];
  return ids;
}

/** The table as the test holds it on the GPU: one buffer viewed in windows, or one buffer per shard. */
function makeTable(W: Float32Array, V: number, C: number, dtype: EmbeddingDtype, layout: string, maxBytes: number) {
  const data = dtype === "f32" ? W : packHalf(W, dtype);
  if (layout === "shards") return { table: uploadTable(gpu, data, V, C, dtype, maxBytes), own: [] as GPUBuffer[] };
  const buf = gpu.upload(data, "weights");
  return { table: tableViews(gpu, buf, V, C, dtype, layout === "views" ? maxBytes : undefined), own: [buf] };
}

function release(t: EmbeddingTable, own: GPUBuffer[]) {
  releaseTable(gpu, t);
  gpu.release(...own);
}

// [dtype, V, C, N, layout, shards]: "one" is the whole table in one binding; "views" splits one
// buffer into 256-byte-aligned windows; "shards" uploads each row range to its own buffer.
it.each([
  ["f32", 37, 13, 19, "one", 1],
  ["bf16", 37, 13, 19, "one", 1],
  ["f16", 37, 13, 19, "one", 1],
  ["f32", 37, 13, 19, "views", 8],
  ["bf16", 41, 13, 50, "views", 4],
  ["f16", 41, 13, 50, "views", 4],
  ["bf16", 37, 13, 19, "shards", 2],
  ["f16", 37, 13, 19, "shards", 3],
  ["f32", 37, 13, 19, "shards", 2],
  ["bf16", 9, 897, 7, "shards", 3],
  ["f16", 5, 2101, 3, "shards", 2], // C > 4 * 256: several workgroups per token
] as const)("embedding %s V=%i C=%i N=%i %s matches the CPU reference", async (dtype, V, C, N, layout, nShards) => {
  const rng = new Rng(V * C + N);
  const W = rng.f32(V * C, -3, 3);
  const ids = randomIds(rng, N, V);
  const bpe = dtype === "f32" ? 4 : 2;
  // Small maxBytes force the split: whole rows per shard, plus 4 bytes for a row starting and ending
  // mid-word. Views get 300-byte windows at 256-byte offsets: rows then start mid-word (odd `first`).
  const maxBytes = layout === "views" ? 300 : Math.ceil(V / nShards) * C * bpe + 4;
  const { table, own } = makeTable(W, V, C, dtype, layout, maxBytes);
  expect(table.shards.length).toBe(nShards);
  if (layout !== "one" && dtype !== "f32") expect(table.shards.some((s) => s.first % 2 === 1)).toBe(true);
  const bids = gpu.upload(ids);
  const bout = gpu.upload(new Float32Array(N * C).fill(SENTINEL));
  const rec = gpu.recorder();
  embeddingForward(gpu, rec, { W: table, ids: bids, out: bout }, { N });
  const out = rec.read(bout, N * C * 4);
  await rec.submit();
  const Wq = dtype === "f32" ? W : roundHalf(W, dtype);
  assertClose("embedding out", new Float32Array(await out), embeddingReference(Wq, ids, C), EXACT);
  release(table, own);
  gpu.release(bids, bout);
  expect(gpu.errors).toEqual([]);
});

it("an embedding shard writes only the tokens whose id falls in its rows", async () => {
  const [V, C, N] = [30, 5, 40];
  const rng = new Rng(3);
  const W = rng.f32(V * C);
  const ids = randomIds(rng, N, V);
  const table = uploadTable(gpu, packHalf(W, "bf16"), V, C, "bf16", 36); // 3 rows of 5 bf16 per shard
  const mid = table.shards[1];
  expect([mid.r0, mid.r1, mid.first]).toEqual([3, 6, 1]); // element 15 is the high half of its shard's word 0
  const [bids, bout] = [gpu.upload(ids), gpu.upload(new Float32Array(N * C).fill(SENTINEL))];
  const rec = gpu.recorder();
  embeddingShard(gpu, rec, { shard: mid, ids: bids, out: bout }, { N, C, dtype: "bf16" });
  const out = rec.read(bout, N * C * 4);
  await rec.submit();
  const ref = embeddingReference(roundHalf(W, "bf16"), ids, C);
  for (let n = 0; n < N; n++) if (ids[n] < mid.r0 || ids[n] >= mid.r1) ref.fill(SENTINEL, n * C, (n + 1) * C);
  assertClose("embedding out, one shard", new Float32Array(await out), ref, EXACT);
  const rec2 = gpu.recorder();
  expect(() => embeddingForward(gpu, rec2, { W: { ...table, shards: [mid] }, ids: bids, out: bout }, { N })).toThrow(
    /shard rows/,
  );
  await rec2.submit();
  releaseTable(gpu, table);
  gpu.release(bids, bout);
  expect(gpu.errors).toEqual([]);
});

it.each(["f32", "bf16"] as const)("a scaled %s lookup (Gemma's sqrt(hidden_size)) over shards", async (dtype) => {
  const [V, C, N] = [37, 13, 19];
  const scale = Math.sqrt(1152);
  const rng = new Rng(5);
  const W = rng.f32(V * C, -3, 3);
  const ids = randomIds(rng, N, V);
  const { table, own } = makeTable(W, V, C, dtype, "shards", 20 * C * (dtype === "f32" ? 4 : 2));
  expect(table.shards.length).toBe(2);
  const [bids, bout] = [gpu.upload(ids), gpu.buffer(N * C * 4)];
  const rec = gpu.recorder();
  embeddingForward(gpu, rec, { W: table, ids: bids, out: bout }, { N }, { scale });
  const out = rec.read(bout, N * C * 4);
  await rec.submit();
  // One f32 multiply by the f32 scale: the f64 product of two f32 values rounded once is the same number.
  const Wq = dtype === "f32" ? W : roundHalf(W, dtype);
  const ref = embeddingReference(Wq, ids, C, Float32Array, Math.fround(scale));
  assertClose("scaled embedding", new Float32Array(await out), ref, EXACT);
  release(table, own);
  gpu.release(bids, bout);
  expect(gpu.errors).toEqual([]);
});

it("splitRows tiles the table with aligned windows no larger than maxBytes", () => {
  const rng = new Rng(9);
  for (let t = 0; t < 200; t++) {
    const dtype = (["f32", "bf16", "f16"] as const)[t % 3];
    const [V, C, align] = [1 + rng.int(300), 1 + rng.int(40), [4, 256][t & 1]];
    const bpe = dtype === "f32" ? 4 : 2;
    const maxBytes = align + 8 + C * bpe * (1 + rng.int(50));
    const ranges = splitRows(V, C, dtype, maxBytes, align);
    let next = 0;
    for (const r of ranges) {
      expect(r.r0).toBe(next);
      expect(r.r1).toBeGreaterThan(r.r0);
      expect(r.offset % align).toBe(0);
      expect(r.size % 4).toBe(0);
      expect(r.size).toBeLessThanOrEqual(maxBytes);
      expect(r.offset + r.first * bpe).toBe(r.r0 * C * bpe); // row r0 is where `first` says
      expect(r.offset + r.size).toBeGreaterThanOrEqual(r.r1 * C * bpe); // the last row is inside
      next = r.r1;
    }
    expect(next).toBe(V);
  }
  expect(() => splitRows(10, 100, "f32", 200)).toThrow(/does not fit/);
});

// [V, C, N, layout, maxBytes]: dW as one binding, as 256-byte-aligned views of one buffer, and as
// separate buffers; N > V so ids repeat and rows sum several tokens.
it.each([
  [37, 13, 60, "one", 0],
  [37, 13, 60, "views", 300],
  [23, 300, 31, "shards", 3000],
  [11, 897, 5, "views", 1 << 14],
] as const)("embedding backward V=%i C=%i N=%i dW %s matches the CPU reference", async (V, C, N, layout, maxBytes) => {
  const rng = new Rng(V + C + N);
  const ids = randomIds(rng, N, V);
  const dout = rng.f32(N * C);
  const dW0 = rng.f32(V * C); // e.g. the tied LM head's gradient, already there
  const { table, own } = makeTable(dW0, V, C, "f32", layout, maxBytes || Infinity);
  if (layout !== "one") expect(table.shards.length).toBeGreaterThan(1);
  const bdout = gpu.upload(dout);
  const read = async () => {
    const rec = gpu.recorder();
    const parts = table.shards.map((s) => {
      const b = "buffer" in s.binding ? s.binding : { buffer: s.binding };
      return rec.read(b.buffer, (s.r1 - s.r0) * C * 4, (b.offset ?? 0) + s.first * 4);
    });
    await rec.submit();
    const out = new Float32Array(V * C);
    (await Promise.all(parts)).forEach((a, i) => out.set(new Float32Array(a), table.shards[i].r0 * C));
    return out;
  };
  const rec = gpu.recorder();
  embeddingBackward(gpu, rec, { dout: bdout, dW: table }, { ids });
  await rec.submit();
  const dW = await read();
  // Each row adds its tokens' sum (GPU) or each token in turn (CPU): f32 rounding differs slightly.
  assertClose("dW", dW, embeddingBackwardReference(dout, ids, V, C, dW0), { atol: 1e-6, rtol: 1e-6 });
  // Deterministic (no atomics, fixed order): a second run from the same start is bit-identical.
  if (own[0]) gpu.write(own[0], dW0);
  else for (const s of table.shards) gpu.write(s.binding as GPUBuffer, dW0.subarray(s.r0 * C, s.r1 * C));
  const rec2 = gpu.recorder();
  embeddingBackward(gpu, rec2, { dout: bdout, dW: table }, { ids });
  await rec2.submit();
  expect(await read()).toEqual(dW);
  release(table, own);
  gpu.release(bdout);
  expect(gpu.errors).toEqual([]);
});

it("embedding backward reference matches finite differences (f64)", () => {
  const [V, C, N] = [5, 3, 8];
  const rng = new Rng(4);
  const ids = randomIds(rng, N, V);
  const W = rng.f32(V * C);
  const dout = rng.f32(N * C);
  const [fW] = finiteDiff((x) => dot(embeddingReference(x[0], ids, C, Float64Array), dout), [f64(W)]);
  assertClose("dW vs finite diff", embeddingBackwardReference(dout, ids, V, C), fW, { atol: 1e-7, rtol: 1e-6 });
});

it("embedding backward rejects ids outside the vocabulary", async () => {
  const table = uploadTable(gpu, new Float32Array(12), 4, 3, "f32");
  const bdout = gpu.upload(new Float32Array(6));
  const rec = gpu.recorder();
  expect(() => embeddingBackward(gpu, rec, { dout: bdout, dW: table }, { ids: [1, 4] })).toThrow(
    /ids\[1\] = 4 is not in \[0, 4\)/,
  );
  await rec.submit();
  releaseTable(gpu, table);
  gpu.release(bdout);
});

it("embedding backward into a zeroed dW of separate shard buffers (allocTable)", async () => {
  const [V, C, N] = [19, 7, 25];
  const rng = new Rng(8);
  const ids = randomIds(rng, N, V);
  const dout = rng.f32(N * C);
  const bdout = gpu.upload(dout);
  const rec = gpu.recorder();
  const dW = allocTable(gpu, rec, V, C, "f32", 5 * C * 4); // 5 rows per shard: 4 shards
  expect(dW.shards.length).toBe(4);
  embeddingBackward(gpu, rec, { dout: bdout, dW }, { ids });
  const parts = dW.shards.map((s) => rec.read(s.binding as GPUBuffer, (s.r1 - s.r0) * C * 4));
  await rec.submit();
  const got = new Float32Array(V * C);
  (await Promise.all(parts)).forEach((a, i) => got.set(new Float32Array(a), dW.shards[i].r0 * C));
  assertClose("dW", got, embeddingBackwardReference(dout, ids, V, C), { atol: 1e-6, rtol: 1e-6 });
  releaseTable(gpu, dW);
  gpu.release(bdout);
  expect(gpu.errors).toEqual([]);
});
