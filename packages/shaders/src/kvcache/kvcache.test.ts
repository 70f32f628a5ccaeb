import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { kvcacheWrite } from "./index.ts";
import { kvcacheWriteReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

// (slot, pos) per token: sequences continuing at various positions, plus padding tokens that must be skipped.
it.each([
  [3, 5, 2, 8, 7], // slots, tmax, kv, d, n
  [4, 9, 1, 64, 13],
])(
  "kvcache_forward scatters into slots=%i tmax=%i kv=%i d=%i (n=%i), skipping invalid tokens",
  async (slots, tmax, kv, d, n) => {
    const rng = new Rng(slots * 31 + d);
    const row = kv * d;
    const slotPos = new Uint32Array(2 * n);
    const used = new Set<string>();
    for (let t = 0; t < n; t++) {
      let s: number, pos: number;
      if (t % 5 === 4)
        [s, pos] = t % 2 ? [0xffffffff, 0] : [rng.int(slots), tmax + rng.int(3)]; // padding / out of range
      else
        do [s, pos] = [rng.int(slots), rng.int(tmax)];
        while (used.has(`${s},${pos}`)); // one writer per row
      used.add(`${s},${pos}`);
      slotPos.set([s, pos], 2 * t);
    }
    const [k, v] = [rng.f32(n * row), rng.f32(n * row)];
    const [kc, vc] = [rng.f32(slots * tmax * row), rng.f32(slots * tmax * row)];
    const bufs = {
      slotPos: gpu.upload(slotPos),
      k: gpu.upload(k),
      v: gpu.upload(v),
      kc: gpu.upload(kc),
      vc: gpu.upload(vc),
    };
    const rec = gpu.recorder();
    kvcacheWrite(gpu, rec, bufs, { n, kv, d, slots, tmax });
    const [gk, gv] = [rec.read(bufs.kc, kc.byteLength), rec.read(bufs.vc, vc.byteLength)];
    await rec.submit();
    const ref = kvcacheWriteReference(kc, vc, k, v, slotPos, n, row, slots, tmax);
    // A copy: exact.
    assertClose("kc", new Float32Array(await gk), ref.kc, { atol: 0, rtol: 0 });
    assertClose("vc", new Float32Array(await gv), ref.vc, { atol: 0, rtol: 0 });
    gpu.release(...Object.values(bufs));
    expect(gpu.errors).toEqual([]);
  },
);
