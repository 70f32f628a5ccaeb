import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import { swiglu, swigluBackward } from "./index.ts";
import { swigluBackwardReference, swigluReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// f32 elementwise math; GPU exp may differ from Math.exp by a few ulp.
const TOL = { atol: 1e-6, rtol: 1e-5 };

function inputs(n: number, seed: number) {
  const rng = new Rng(seed);
  const g = rng.f32(n, -6, 6);
  // Saturated gates must stay finite (sigmoid -> 0 or 1, never NaN).
  if (n > 4) g.set([-100, 100, -90, 90]);
  return { g, u: rng.f32(n, -2, 2), dh: rng.f32(n, -1, 1) };
}

it.each([
  [1, 1],
  [3, 257],
  [7, 131],
])("swiglu forward and backward match the CPU reference for N=%i F=%i", async (N, F) => {
  const n = N * F;
  const { g, u, dh } = inputs(n, n);
  const [bg, bu, bdh] = [gpu.upload(g), gpu.upload(u), gpu.upload(dh)];
  const [bh, bdg, bdu] = [gpu.buffer(n * 4), gpu.buffer(n * 4), gpu.buffer(n * 4)];
  const rec = gpu.recorder();
  swiglu(gpu, rec, bg, bu, bh, n);
  swigluBackward(gpu, rec, bg, bu, bdh, bdg, bdu, n);
  const [h, dg, du] = [rec.read(bh, n * 4), rec.read(bdg, n * 4), rec.read(bdu, n * 4)];
  await rec.submit();
  const ref = swigluBackwardReference(g, u, dh);
  assertClose("h", new Float32Array(await h), swigluReference(g, u), TOL);
  assertClose("dg", new Float32Array(await dg), ref.dg, TOL);
  assertClose("du", new Float32Array(await du), ref.du, TOL);
  gpu.release(bg, bu, bdh, bh, bdg, bdu);
  expect(gpu.errors).toEqual([]);
});

it("swiglu backward reference matches finite differences (f64)", () => {
  const { g, u, dh } = inputs(24, 5);
  g.set([0, 0, 0, 0]); // the saturated values have vanishing gradients; keep this check informative
  const [fg, fu] = finiteDiff((x) => dot(swigluReference(x[0], x[1], new Float64Array(24)), dh), [f64(g), f64(u)]);
  const ref = swigluBackwardReference(g, u, dh);
  // f32 analytic gradients vs f64 differences: f32 rounding bounds the agreement.
  assertClose("dg vs finite diff", ref.dg, fg, { atol: 1e-6, rtol: 1e-5 });
  assertClose("du vs finite diff", ref.du, fu, { atol: 1e-6, rtol: 1e-5 });
});
