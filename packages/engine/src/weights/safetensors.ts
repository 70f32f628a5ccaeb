// The safetensors format: header parsing with full validation (read from a ByteSource), a writer for adapters,
// checkpoints and tests, and conversion of a tensor's bytes to f32 for CPU use.
// Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}, __metadata__},
// then the data section; offsets are relative to the data section and must tile it exactly.

import { fromBf16, fromF16 } from "@webart/gpu";
import type { ByteSource } from "./source.ts";

export type Dtype = "F32" | "F16" | "BF16";
export const DTYPE_BYTES: Record<Dtype, number> = { F32: 4, F16: 2, BF16: 2 };
const SUPPORTED = "F32, F16, BF16";
/** The safetensors spec caps the header at 100 MB; a bigger length means a corrupt or foreign file. */
export const MAX_HEADER_BYTES = 100_000_000;

export interface TensorInfo {
  name: string;
  /** The file holding it (shard name for sharded checkpoints). */
  file: string;
  dtype: Dtype;
  shape: number[];
  /** Absolute byte offset in the file. */
  offset: number;
  byteLength: number;
}

export interface SafetensorsHeader {
  file: string;
  /** Tensors in file order. */
  tensors: TensorInfo[];
  metadata: Record<string, string>;
  /** Where the data section starts (8 + header length). */
  dataOffset: number;
}

export class WeightsError extends Error {
  constructor(
    readonly file: string,
    readonly tensor: string | null,
    message: string,
  ) {
    super(`${file}: ${tensor === null ? "" : `tensor "${tensor}" `}${message}`);
    this.name = "WeightsError";
  }
}

/** Reads and validates the header of a .safetensors file (two small reads; no tensor data). */
export async function readSafetensorsHeader(src: ByteSource, file = src.name): Promise<SafetensorsHeader> {
  if (src.size < 8)
    throw new WeightsError(file, null, `file is truncated: ${src.size} bytes, less than the 8-byte header length`);
  const lenBytes = await src.read(0, 8);
  const n = new DataView(lenBytes.buffer).getBigUint64(0, true);
  if (n > BigInt(MAX_HEADER_BYTES))
    throw new WeightsError(
      file,
      null,
      `header length ${n} exceeds the ${MAX_HEADER_BYTES}-byte limit (corrupt file, or not safetensors)`,
    );
  const headerLen = Number(n);
  if (8 + headerLen > src.size)
    throw new WeightsError(
      file,
      null,
      `file is truncated: header says ${headerLen} bytes of JSON, but the file has ${src.size - 8} after the length`,
    );
  return parseSafetensorsHeader(file, src.size, await src.read(8, headerLen));
}

/** Validates header JSON bytes for a file of `fileSize` bytes. */
export function parseSafetensorsHeader(file: string, fileSize: number, headerBytes: Uint8Array): SafetensorsHeader {
  const dataOffset = 8 + headerBytes.byteLength;
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(headerBytes));
  } catch (e) {
    throw new WeightsError(file, null, `malformed header (${(e as Error).message})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new WeightsError(file, null, "malformed header: expected a JSON object");

  let metadata: Record<string, string> = {};
  const tensors: TensorInfo[] = [];
  for (const [name, entry] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") {
      metadata = checkMetadata(file, entry);
      continue;
    }
    tensors.push(checkEntry(file, name, entry, dataOffset));
  }

  // Tensors must tile the data section: no overlap, no gap, nothing past the end (as the reference loader checks).
  tensors.sort((a, b) => a.offset - b.offset || a.byteLength - b.byteLength);
  const dataEnd = fileSize;
  let pos = dataOffset;
  for (const t of tensors) {
    const [begin, end] = [t.offset - dataOffset, t.offset - dataOffset + t.byteLength];
    if (t.offset + t.byteLength > dataEnd)
      throw new WeightsError(
        file,
        t.name,
        `data_offsets [${begin}, ${end}] run past the end of the data (${dataEnd - dataOffset} bytes; truncated file?)`,
      );
    if (t.offset < pos)
      throw new WeightsError(
        file,
        t.name,
        `data_offsets [${begin}, ${end}] overlap the previous tensor (which ends at ${pos - dataOffset})`,
      );
    if (t.offset > pos)
      throw new WeightsError(
        file,
        t.name,
        `data_offsets [${begin}, ${end}] leave a gap after byte ${pos - dataOffset}`,
      );
    pos = t.offset + t.byteLength;
  }
  if (pos !== dataEnd)
    throw new WeightsError(file, null, `${dataEnd - pos} bytes after the last tensor are not covered by any tensor`);
  return { file, tensors, metadata, dataOffset };
}

function checkMetadata(file: string, entry: unknown): Record<string, string> {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry))
    throw new WeightsError(file, null, "malformed header: __metadata__ must be an object of strings");
  for (const [k, v] of Object.entries(entry))
    if (typeof v !== "string")
      throw new WeightsError(
        file,
        null,
        `malformed header: __metadata__.${k} must be a string (got ${JSON.stringify(v)})`,
      );
  return entry as Record<string, string>;
}

function checkEntry(file: string, name: string, entry: unknown, dataOffset: number): TensorInfo {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry))
    throw new WeightsError(file, name, "has a malformed header entry (expected {dtype, shape, data_offsets})");
  const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
  if (typeof dtype !== "string") throw new WeightsError(file, name, `has no dtype`);
  if (!Object.hasOwn(DTYPE_BYTES, dtype))
    throw new WeightsError(file, name, `has dtype "${dtype}", which is not supported (supported: ${SUPPORTED})`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
    throw new WeightsError(file, name, `has a malformed shape ${JSON.stringify(shape)}`);
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) ||
    offsets[0] > offsets[1]
  )
    throw new WeightsError(file, name, `has malformed data_offsets ${JSON.stringify(offsets)}`);
  const d = dtype as Dtype;
  const expected = shape.reduce((a: number, b: number) => a * b, 1) * DTYPE_BYTES[d];
  const byteLength = offsets[1] - offsets[0];
  if (byteLength !== expected)
    throw new WeightsError(
      file,
      name,
      `data_offsets [${offsets[0]}, ${offsets[1]}] hold ${byteLength} bytes, but shape [${shape.join(", ")}] of ${d} needs ${expected}`,
    );
  return { name, file, dtype: d, shape: shape as number[], offset: dataOffset + offsets[0], byteLength };
}

export interface TensorData {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** Raw little-endian element data: Float32Array for F32, Uint16Array of bit patterns for F16/BF16, or bytes. */
  data: Float32Array | Uint16Array | Uint8Array;
}

/**
 * The start of a .safetensors file holding tensors of these names, dtypes and shapes in this order: the header's length
 * (8 bytes) and the header, padded so the data is 8-aligned. The tensors' bytes follow it back to back, `dataBytes` in
 * all, so a large file can be written a tensor at a time.
 */
export function safetensorsPrefix(
  tensors: readonly { name: string; dtype: Dtype; shape: readonly number[] }[],
  metadata?: Record<string, string>,
  where = "writeSafetensors",
): { prefix: Uint8Array<ArrayBuffer>; dataBytes: number } {
  const header: Record<string, unknown> = {};
  if (metadata && Object.keys(metadata).length) header.__metadata__ = metadata;
  let pos = 0;
  for (const t of tensors) {
    if (!t.name || t.name === "__metadata__" || Object.hasOwn(header, t.name))
      throw new WeightsError(where, t.name, "has an empty, reserved or duplicate name");
    if (!Object.hasOwn(DTYPE_BYTES, t.dtype))
      throw new WeightsError(where, t.name, `has dtype "${t.dtype}" (supported: ${SUPPORTED})`);
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [pos, pos + bytes] };
    pos += bytes;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.byteLength / 8) * 8;
  if (padded !== json.byteLength)
    json = new TextEncoder().encode(JSON.stringify(header) + " ".repeat(padded - json.byteLength));
  const prefix = new Uint8Array(8 + padded);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(padded), true);
  prefix.set(json, 8);
  return { prefix, dataBytes: pos };
}

/** Serializes tensors (in the given order) into a .safetensors file; the header is padded so data is 8-aligned. */
export function writeSafetensors(tensors: TensorData[], metadata?: Record<string, string>): Uint8Array<ArrayBuffer> {
  const { prefix, dataBytes } = safetensorsPrefix(tensors, metadata);
  for (const t of tensors) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    if (t.data.byteLength !== bytes)
      throw new WeightsError(
        "writeSafetensors",
        t.name,
        `has ${t.data.byteLength} bytes of data, but shape [${t.shape.join(", ")}] of ${t.dtype} needs ${bytes}`,
      );
  }
  const out = new Uint8Array(prefix.byteLength + dataBytes);
  out.set(prefix, 0);
  let at = prefix.byteLength;
  for (const t of tensors) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), at);
    at += t.data.byteLength;
  }
  return out;
}

/** A tensor's values as f32 (bf16/f16 widened exactly), for CPU references and tests. */
export function tensorToF32(t: { dtype: Dtype; bytes: Uint8Array }): Float32Array {
  // Uint8Array's slice copies (a Node Buffer's own slice() would be a view into a larger buffer).
  const own = Uint8Array.prototype.slice.call(t.bytes);
  const n = own.byteLength / DTYPE_BYTES[t.dtype];
  if (t.dtype === "F32") return new Float32Array(own.buffer, 0, n);
  const h = new Uint16Array(own.buffer, 0, n);
  const out = new Float32Array(n);
  const conv = t.dtype === "BF16" ? fromBf16 : fromF16;
  for (let i = 0; i < n; i++) out[i] = conv(h[i]);
  return out;
}
