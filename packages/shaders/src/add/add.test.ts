import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { add } from "./index.ts";
import { addReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

it.each([1, 255, 257, 10_000])("add_forward matches the CPU reference for n=%i", async (n) => {
  const rng = new Rng(n);
  const a = rng.f32(n);
  const b = rng.f32(n);
  const [ba, bb, by] = [gpu.upload(a), gpu.upload(b), gpu.buffer(n * 4)];
  const rec = gpu.recorder();
  add(gpu, rec, { a: ba, b: bb, y: by }, { n });
  const out = rec.read(by, n * 4);
  await rec.submit();
  assertClose("add", new Float32Array(await out), addReference(a, b), { atol: 0, rtol: 0 });
  gpu.release(ba, bb, by);
  expect(gpu.errors).toEqual([]);
});
