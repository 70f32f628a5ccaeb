// safetensors: the writer round-trips through the reader for every dtype, and every kind of broken file fails
// with an error naming the file and tensor. Bad files are written to a temp dir and read through fileSource.
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rng, roundHalf, toBf16, toF16 } from "@webart/gpu";
import {
  fileSource,
  memorySource,
  readSafetensorsHeader,
  tensorToF32,
  WeightReader,
  WeightsError,
  writeSafetensors,
} from "./index.ts";
import { removeDir, tempDir } from "./testing.ts";

let dir: string;
beforeAll(async () => void (dir = await tempDir()));
afterAll(() => removeDir(dir));

/** A file from a header (object or raw text) and a data section. */
function rawFile(header: object | string, data: Uint8Array | number): Uint8Array {
  const json = new TextEncoder().encode(typeof header === "string" ? header : JSON.stringify(header));
  const body = typeof data === "number" ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + json.byteLength + body.byteLength);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.byteLength), true);
  out.set(json, 8);
  out.set(body, 8 + json.byteLength);
  return out;
}

async function failure(name: string, bytes: Uint8Array): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, bytes);
  const src = await fileSource(path);
  try {
    await readSafetensorsHeader(src);
  } catch (e) {
    expect(e).toBeInstanceOf(WeightsError);
    const msg = (e as Error).message;
    expect(msg.startsWith(path + ": ")).toBe(true);
    return msg.slice(path.length + 2);
  } finally {
    await src.close?.();
  }
  throw new Error(`${name} was accepted`);
}

describe("writeSafetensors", () => {
  it("round-trips F32, F16 and BF16 tensors and metadata through the reader", async () => {
    const rng = new Rng(7);
    const f = Float32Array.from({ length: 15 }, () => rng.next() * 4 - 2);
    const bytes = writeSafetensors(
      [
        { name: "a.f32", dtype: "F32", shape: [3, 5], data: f },
        { name: "b.f16", dtype: "F16", shape: [15], data: Uint16Array.from(f, toF16) },
        { name: "c.bf16", dtype: "BF16", shape: [5, 3], data: Uint16Array.from(f, toBf16) },
        { name: "empty", dtype: "F32", shape: [0, 4], data: new Float32Array(0) },
      ],
      { format: "pt", step: "3" },
    );
    const header = await readSafetensorsHeader(memorySource(bytes, "x.safetensors"));
    expect(header.dataOffset % 8).toBe(0); // padded so F32 data can be viewed in place
    expect(header.metadata).toEqual({ format: "pt", step: "3" });
    expect(header.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual([
      ["a.f32", "F32", [3, 5]],
      ["b.f16", "F16", [15]],
      ["c.bf16", "BF16", [5, 3]],
      ["empty", "F32", [0, 4]],
    ]);
    const reader = await WeightReader.fromSource(memorySource(bytes, "x.safetensors"));
    expect(Array.from(tensorToF32(await reader.read("a.f32")))).toEqual(Array.from(f));
    expect(Array.from(tensorToF32(await reader.read("b.f16")))).toEqual(Array.from(roundHalf(f, "f16")));
    expect(Array.from(tensorToF32(await reader.read("c.bf16")))).toEqual(Array.from(roundHalf(f, "bf16")));
    expect((await reader.read("empty")).bytes.byteLength).toBe(0);
  });

  it("rejects data that disagrees with the shape, and duplicate names", () => {
    expect(() => writeSafetensors([{ name: "w", dtype: "F32", shape: [2, 2], data: new Float32Array(3) }])).toThrow(
      'tensor "w" has 12 bytes of data, but shape [2, 2] of F32 needs 16',
    );
    const t = { name: "w", dtype: "F32" as const, shape: [1], data: new Float32Array(1) };
    expect(() => writeSafetensors([t, t])).toThrow("duplicate");
  });
});

describe("safetensors header errors", () => {
  const ok = { w: { dtype: "F32", shape: [2, 3], data_offsets: [0, 24] } };

  it("truncated files", async () => {
    expect(await failure("short.safetensors", new Uint8Array(3))).toMatch(
      /truncated: 3 bytes, less than the 8-byte header length/,
    );
    const full = rawFile(ok, 24);
    expect(await failure("cut-header.safetensors", full.slice(0, 20))).toMatch(
      /truncated: header says \d+ bytes of JSON/,
    );
    expect(await failure("cut-data.safetensors", full.slice(0, full.byteLength - 5))).toBe(
      'tensor "w" data_offsets [0, 24] run past the end of the data (19 bytes; truncated file?)',
    );
  });

  it("oversized and malformed headers", async () => {
    const huge = new Uint8Array(16);
    new DataView(huge.buffer).setBigUint64(0, 200_000_000n, true);
    expect(await failure("huge.safetensors", huge)).toMatch(/header length 200000000 exceeds the 100000000-byte limit/);
    expect(await failure("badjson.safetensors", rawFile("{not json", 0))).toMatch(/^malformed header \(/);
    expect(await failure("array.safetensors", rawFile("[1, 2]", 0))).toBe("malformed header: expected a JSON object");
    expect(await failure("meta.safetensors", rawFile({ __metadata__: { step: 3 } }, 0))).toMatch(
      /__metadata__\.step must be a string/,
    );
    expect(
      await failure("shape.safetensors", rawFile({ w: { dtype: "F32", shape: [-1], data_offsets: [0, 0] } }, 0)),
    ).toMatch(/tensor "w" has a malformed shape/);
  });

  it("dtypes other than F32, F16, BF16", async () => {
    const i64 = { ids: { dtype: "I64", shape: [3], data_offsets: [0, 24] } };
    expect(await failure("i64.safetensors", rawFile(i64, 24))).toBe(
      'tensor "ids" has dtype "I64", which is not supported (supported: F32, F16, BF16)',
    );
    const q4 = { q: { dtype: "Q4_K", shape: [2], data_offsets: [0, 1] } };
    expect(await failure("q4.safetensors", rawFile(q4, 1))).toMatch(
      /tensor "q" has dtype "Q4_K", which is not supported/,
    );
  });

  it("offsets out of range, overlapping, mismatched with the shape, or leaving gaps", async () => {
    const two = (a: number[], b: number[]) => ({
      a: { dtype: "F32", shape: [2], data_offsets: a },
      b: { dtype: "F32", shape: [2], data_offsets: b },
    });
    expect(await failure("range.safetensors", rawFile(two([0, 8], [8, 16]), 12))).toMatch(
      /tensor "b" data_offsets \[8, 16\] run past the end/,
    );
    expect(await failure("overlap.safetensors", rawFile(two([0, 8], [4, 12]), 12))).toMatch(
      /tensor "b" .* overlap the previous tensor/,
    );
    expect(await failure("gap.safetensors", rawFile(two([0, 8], [12, 20]), 20))).toMatch(
      /tensor "b" .* leave a gap after byte 8/,
    );
    expect(
      await failure("size.safetensors", rawFile({ w: { dtype: "BF16", shape: [2, 3], data_offsets: [0, 24] } }, 24)),
    ).toBe('tensor "w" data_offsets [0, 24] hold 24 bytes, but shape [2, 3] of BF16 needs 12');
    expect(await failure("trailing.safetensors", rawFile(ok, 30))).toBe(
      "6 bytes after the last tensor are not covered by any tensor",
    );
    expect(
      await failure("offsets.safetensors", rawFile({ w: { dtype: "F32", shape: [1], data_offsets: [4, 0] } }, 4)),
    ).toMatch(/malformed data_offsets \[4,0\]/);
  });
});

describe("Node Buffers", () => {
  it("read through memorySource and tensorToF32 as their bytes, not as the Buffer's whole backing store", async () => {
    const data = Float32Array.of(1.5, -2, 3.25, 0.125);
    const file = writeSafetensors([{ name: "t", dtype: "F32", shape: [4], data }]);
    // A Buffer inside a larger ArrayBuffer (as pooled Buffers and file reads can be), whose slice() is a view.
    const big = Buffer.alloc(file.byteLength + 24);
    big.set(file, 24);
    const buf = big.subarray(24);
    const r = await WeightReader.fromSource(memorySource(buf, "buffer"));
    expect([...tensorToF32(await r.read("t"))]).toEqual([...data]);
    expect([...tensorToF32({ dtype: "F32", bytes: Buffer.from(new Uint8Array(data.buffer)) })]).toEqual([...data]);
  });
});
