import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import { rmsnormForward, rmsnormBackward, rmsnormVariant } from "./index.ts";
import { rmsnormBackwardReference, rmsnormReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

const EPS = 1e-6;
// f32 with sums over C (and over rows for dw) in a different order than the CPU loop.
const Y_TOL = { atol: 1e-6, rtol: 1e-5 };
const DX_TOL = { atol: 1e-5, rtol: 1e-4 };
const DW_TOL = { atol: 1e-4, rtol: 1e-4 };

async function check(rows: number, C: number, tpr: number | undefined, wg: number | undefined, accumulate: boolean) {
  const rng = new Rng(rows * 1000 + C + (tpr ?? 0));
  const opts = { threadsPerRow: tpr, workgroupSize: wg };
  const x = rng.f32(rows * C, -2, 2);
  const w = rng.f32(C, 0.5, 1.5);
  const dy = rng.f32(rows * C, -1, 1);
  const dx0 = rng.f32(rows * C, -1, 1); // what the residual stream already holds
  const dw0 = rng.f32(C, -1, 1);
  const [bx, bw, bdy] = [gpu.upload(x), gpu.upload(w), gpu.upload(dy)];
  const [by, brstd] = [gpu.buffer(rows * C * 4), gpu.buffer(rows * 4)];
  const [bdx, bdw] = [gpu.upload(dx0), gpu.upload(dw0)];
  const rec = gpu.recorder();
  rmsnormForward(gpu, rec, { x: bx, w: bw, y: by, rstd: brstd }, { rows, C, eps: EPS }, opts);
  const bufs = { x: bx, w: bw, rstd: brstd, dy: bdy, dx: bdx, dw: bdw };
  rmsnormBackward(gpu, rec, bufs, { rows, C }, { ...opts, accumulate, accumulateDw: accumulate });
  const reads = [by, brstd, bdx, bdw].map((b, i) => rec.read(b, [rows * C, rows, rows * C, C][i] * 4));
  await rec.submit();
  const [y, rstd, dx, dw] = (await Promise.all(reads)).map((a) => new Float32Array(a));
  const ref = rmsnormReference(x, w, rows, C, EPS);
  const bref = rmsnormBackwardReference(x, w, ref.rstd, dy, rows, C);
  if (accumulate) {
    bref.dx.forEach((v, i) => (bref.dx[i] = v + dx0[i]));
    bref.dw.forEach((v, i) => (bref.dw[i] = v + dw0[i]));
  }
  assertClose("y", y, ref.y, Y_TOL);
  assertClose("rstd", rstd, ref.rstd, Y_TOL);
  assertClose("dx", dx, bref.dx, DX_TOL);
  assertClose("dw", dw, bref.dw, DW_TOL);
  gpu.release(bx, bw, bdy, by, brstd, bdx, bdw);
  expect(gpu.errors).toEqual([]);
}

// [rows, C, threads per row, workgroup size, accumulate]: rows not a multiple of rows-per-workgroup,
// odd C, one thread per row, a full workgroup per row, the per-head shape (many short rows), > 1 dw
// block, and the device's default variant (undefined).
it.each([
  [1, 1, 1, 256, false],
  [3, 896, 256, 256, false],
  [5, 897, 64, 128, true],
  [37, 13, 1, 256, true],
  [300, 13, 4, 64, false],
  [97, 64, 16, 256, true],
  [70, 128, 32, 32, false],
  [130, 128, 1, 64, true],
  [9, 900, undefined, undefined, true],
  [200, 64, undefined, undefined, false],
])("rmsnorm rows=%i C=%i tpr=%s wg=%s accumulate=%s matches the CPU reference", check);

// The residual add in the same pass (Gemma's x + norm(branch)): every layout, against the reference plus the residual.
it.each([
  [1, 1, 1, 256],
  [37, 13, 1, 64],
  [5, 897, 64, 128],
  [9, 900, undefined, undefined],
])("rmsnorm with add: rows=%i C=%i tpr=%s wg=%s gives add + norm(x) w and the same rstd", async (rows, C, tpr, wg) => {
  const rng = new Rng(rows * 7 + C);
  const [x, w, res] = [rng.f32(rows * C, -2, 2), rng.f32(C, 0.5, 1.5), rng.f32(rows * C, -3, 3)];
  const [bx, bw, badd] = [gpu.upload(x), gpu.upload(w), gpu.upload(res)];
  const [by, brstd] = [gpu.buffer(rows * C * 4), gpu.buffer(rows * 4)];
  const rec = gpu.recorder();
  const opts = { threadsPerRow: tpr, workgroupSize: wg };
  rmsnormForward(gpu, rec, { x: bx, w: bw, y: by, rstd: brstd, add: badd }, { rows, C, eps: EPS }, opts);
  const reads = [rec.read(by, rows * C * 4), rec.read(brstd, rows * 4)];
  await rec.submit();
  const [y, rstd] = (await Promise.all(reads)).map((a) => new Float32Array(a));
  const ref = rmsnormReference(x, w, rows, C, EPS);
  assertClose(
    "y",
    y,
    ref.y.map((v, i) => v + res[i]),
    Y_TOL,
  );
  assertClose("rstd", rstd, ref.rstd, Y_TOL);
  gpu.release(bx, bw, badd, by, brstd);
  expect(gpu.errors).toEqual([]);
});

it("rmsnorm variants: one thread per row on SwiftShader, ~4 elements per thread elsewhere; bad shapes throw", () => {
  const v = rmsnormVariant(gpu, 900);
  if (gpu.kind.architecture === "swiftshader") expect(v).toEqual({ tpr: 1, wg: 64 });
  else expect(v).toEqual({ tpr: 256, wg: 256 });
  expect(() => rmsnormVariant(gpu, 64, { threadsPerRow: 3 })).toThrow(/powers of two/);
  expect(() => rmsnormVariant(gpu, 64, { threadsPerRow: 64, workgroupSize: 32 })).toThrow(/tpr <= wg/);
});

it("rmsnorm backward reference matches finite differences (f64)", () => {
  const [rows, C] = [3, 5];
  const rng = new Rng(11);
  const x = rng.f32(rows * C, -2, 2);
  const w = rng.f32(C, 0.5, 1.5);
  const dy = rng.f32(rows * C, -1, 1);
  const loss = (v: Float64Array[]) => dot(rmsnormReference(v[0], v[1], rows, C, EPS, Float64Array).y, dy);
  const [fx, fw] = finiteDiff(loss, [f64(x), f64(w)]);
  const { rstd } = rmsnormReference(x, w, rows, C, EPS);
  const { dx, dw } = rmsnormBackwardReference(x, w, rstd, dy, rows, C);
  // The analytic gradient runs in f32 (rstd stored as f32); agreement to ~1e-6 relative.
  assertClose("dx vs finite diff", dx, fx, { atol: 1e-5, rtol: 1e-5 });
  assertClose("dw vs finite diff", dw, fw, { atol: 1e-5, rtol: 1e-5 });
});
