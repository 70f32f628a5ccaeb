import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  swigluBackward,
  swigluBackwardPacked,
  swigluForward,
  swigluForwardPacked,
  type GatedActivation,
} from "./index.ts";
import { swigluBackwardReference, swigluReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// f32 elementwise math; GPU exp and tanh may differ from Math's by a few ulp.
const TOL = { atol: 1e-6, rtol: 1e-5 };

function inputs(n: number, seed: number) {
  const rng = new Rng(seed);
  const g = rng.f32(n, -6, 6);
  // Saturated gates must stay finite (sigmoid -> 0 or 1, tanh -> ±1, never NaN).
  if (n > 4) g.set([-100, 100, -90, 90]);
  return { g, u: rng.f32(n, -2, 2), dh: rng.f32(n, -1, 1) };
}

it.each([
  [1, 1, "silu"],
  [3, 257, "silu"],
  [7, 131, "silu"],
  [1, 1, "gelu_tanh"],
  [3, 257, "gelu_tanh"],
  [7, 131, "gelu_tanh"],
] as const)("forward and backward match the CPU reference for N=%i F=%i act=%s", async (N, F, act) => {
  const n = N * F;
  const { g, u, dh } = inputs(n, n);
  const [bg, bu, bdh] = [gpu.upload(g), gpu.upload(u), gpu.upload(dh)];
  const [bh, bdg, bdu] = [gpu.buffer(n * 4), gpu.buffer(n * 4), gpu.buffer(n * 4)];
  const rec = gpu.recorder();
  swigluForward(gpu, rec, { g: bg, u: bu, h: bh }, { n }, { act });
  swigluBackward(gpu, rec, { g: bg, u: bu, dh: bdh, dg: bdg, du: bdu }, { n }, { act });
  const [h, dg, du] = [rec.read(bh, n * 4), rec.read(bdg, n * 4), rec.read(bdu, n * 4)];
  await rec.submit();
  const ref = swigluBackwardReference(g, u, dh, act);
  assertClose("h", new Float32Array(await h), swigluReference(g, u, undefined, act), TOL);
  assertClose("dg", new Float32Array(await dg), ref.dg, TOL);
  assertClose("du", new Float32Array(await du), ref.du, TOL);
  gpu.release(bg, bu, bdh, bh, bdg, bdu);
  expect(gpu.errors).toEqual([]);
});

it.each([
  [1, 1, "silu"],
  [3, 257, "silu"],
  [5, 40, "gelu_tanh"],
] as const)("packed (g | u side by side in rows of 2F): N=%i F=%i act=%s", async (N, F, act) => {
  const n = N * F;
  const { g, u, dh } = inputs(n, n + 1);
  const gu = new Float32Array(N * 2 * F);
  for (let r = 0; r < N; r++) {
    gu.set(g.subarray(r * F, (r + 1) * F), r * 2 * F);
    gu.set(u.subarray(r * F, (r + 1) * F), r * 2 * F + F);
  }
  const [bgu, bdh, bh, bdgu] = [gpu.upload(gu), gpu.upload(dh), gpu.buffer(n * 4), gpu.buffer(2 * n * 4)];
  const rec = gpu.recorder();
  swigluForwardPacked(gpu, rec, { gu: bgu, h: bh }, { N, F }, { act });
  swigluBackwardPacked(gpu, rec, { gu: bgu, dh: bdh, dgu: bdgu }, { N, F }, { act });
  const [h, dgu] = [rec.read(bh, n * 4), rec.read(bdgu, 2 * n * 4)];
  await rec.submit();
  const ref = swigluBackwardReference(g, u, dh, act);
  assertClose("h", new Float32Array(await h), swigluReference(g, u, undefined, act), TOL);
  const got = new Float32Array(await dgu);
  const want = new Float32Array(2 * n);
  for (let r = 0; r < N; r++) {
    want.set(ref.dg.subarray(r * F, (r + 1) * F), r * 2 * F);
    want.set(ref.du.subarray(r * F, (r + 1) * F), r * 2 * F + F);
  }
  assertClose("dgu", got, want, TOL);
  gpu.release(bgu, bdh, bh, bdgu);
  expect(gpu.errors).toEqual([]);
});

it("packed refuses a gu smaller than (N, 2F)", () => {
  const [gu, h] = [gpu.buffer(4 * 4 * 3), gpu.buffer(64)];
  const rec = gpu.recorder();
  expect(() => swigluForwardPacked(gpu, rec, { gu, h }, { N: 2, F: 16 }, {})).toThrow(/needs 256 \(N, 2F\)/);
  rec.abandon();
  gpu.release(gu, h);
});

it.each(["silu", "gelu_tanh"] as GatedActivation[])(
  "backward reference (%s) matches finite differences (f64)",
  (act) => {
    const { g, u, dh } = inputs(24, 5);
    g.set([0, 0, 0, 0]); // the saturated values have vanishing gradients; keep this check informative
    const loss = (x: Float64Array[]) => dot(swigluReference(x[0], x[1], new Float64Array(24), act), dh);
    const [fg, fu] = finiteDiff(loss, [f64(g), f64(u)]);
    const ref = swigluBackwardReference(g, u, dh, act);
    // f32 analytic gradients vs f64 differences: f32 rounding bounds the agreement.
    assertClose("dg vs finite diff", ref.dg, fg, { atol: 1e-6, rtol: 1e-5 });
    assertClose("du vs finite diff", ref.du, fu, { atol: 1e-6, rtol: 1e-5 });
  },
);

it("gelu_tanh matches torch's gelu(approximate='tanh') at a few points", () => {
  // Values from torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64), approximate="tanh").
  const x = [-3, -1, -0.5, 0, 0.5, 1, 3];
  const want = [
    -0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0, 0.34571400982514394, 0.8411919906082768,
    2.996362607918227,
  ];
  const got = swigluReference(x, new Array(x.length).fill(1), new Float64Array(x.length), "gelu_tanh");
  assertClose("gelu_tanh", got, want, { atol: 1e-15, rtol: 1e-14 });
});
