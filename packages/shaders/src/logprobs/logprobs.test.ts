import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, dot, f64, finiteDiff } from "@webart/gpu/check";
import {
  ALLOW_ALL,
  logprobsBackward,
  logprobsChunk,
  logprobsFinalize,
  logprobsStatsBytes,
  packAllowed,
} from "./index.ts";
import { logprobsBackwardReference, logprobsReference } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

interface Case {
  N: number;
  V: number;
  Vc: number; // chunk width
  T: number; // temperature
  padded: boolean; // chunk buffers stored (N, Vc) even when the last chunk is narrower
  scale: number; // logits uniform in [-scale, scale)
  wg?: number; // threads per row of the chunk kernel; default: this device's (8 on SwiftShader, 256 on GPUs)
  masked?: boolean; // every other row gets an allowed set (the target and ~a third of the vocabulary)
}

function inputs(c: Case, seed: number) {
  const rng = new Rng(seed);
  const logits = rng.f32(c.N * c.V, -c.scale, c.scale); // (N, V)
  const targets = Uint32Array.from({ length: c.N }, () => rng.int(c.V));
  const dlogp = rng.f32(c.N);
  const dentropy = rng.f32(c.N);
  const words = Math.ceil(c.V / 32);
  // Rows 0, 2, ... share one set when it holds their targets, else get their own; rows 1, 3, ... have none.
  const shared = new Uint32Array(words);
  for (let j = 0; j < c.V; j++) if (rng.next() < 1 / 3) shared[j >>> 5] |= 1 << (j & 31);
  const allowed = c.masked
    ? Array.from({ length: c.N }, (_, n) => {
        if (n % 2) return null;
        const t = targets[n];
        if (shared[t >>> 5] & (1 << (t & 31))) return shared;
        const own = shared.slice();
        own[t >>> 5] |= 1 << (t & 31);
        return own;
      })
    : undefined;
  return { logits, targets, dlogp, dentropy, allowed };
}

/** The chunk [v0, v0 + cols) of every row, as the LM-head matmul would write it. */
function chunkOf(logits: Float32Array, c: Case, v0: number, cols: number): { data: Float32Array; ld: number } {
  const ld = c.padded ? c.Vc : cols;
  const data = new Float32Array((c.N - 1) * ld + cols);
  for (let n = 0; n < c.N; n++) data.set(logits.subarray(n * c.V + v0, n * c.V + v0 + cols), n * ld);
  return { data, ld };
}

const cases: Case[] = [
  { N: 5, V: 1000, Vc: 256, T: 1, padded: false, scale: 4 },
  { N: 5, V: 1000, Vc: 256, T: 1, padded: false, scale: 4, wg: 256 },
  { N: 7, V: 333, Vc: 100, T: 0.7, padded: true, scale: 4 },
  { N: 7, V: 333, Vc: 100, T: 0.7, padded: true, scale: 4, wg: 8 },
  { N: 3, V: 1001, Vc: 1001, T: 1.3, padded: false, scale: 4 },
  { N: 4, V: 517, Vc: 64, T: 1, padded: false, scale: 30 }, // large logits: the online max must keep it stable
  { N: 6, V: 1000, Vc: 256, T: 1, padded: false, scale: 4, masked: true },
  { N: 7, V: 333, Vc: 100, T: 0.7, padded: true, scale: 4, wg: 8, masked: true },
  { N: 5, V: 517, Vc: 64, T: 1, padded: false, scale: 30, wg: 256, masked: true },
];

it.each(cases)("chunked forward and backward match the unchunked reference: %o", async (c) => {
  const { logits, targets, dlogp, dentropy, allowed } = inputs(c, c.N * 1000 + c.V);
  const ref = logprobsReference(logits, targets, c.N, c.V, c.T, allowed);
  const [bt, bstats] = [gpu.upload(targets), gpu.buffer(logprobsStatsBytes(c.N))];
  const allow = allowed ? gpu.upload(packAllowed(allowed, Math.ceil(c.V / 32))) : undefined;
  const [blp, bent, blse] = [gpu.buffer(c.N * 4), gpu.buffer(c.N * 4), gpu.buffer(c.N * 4)];
  const rec = gpu.recorder();
  const chunks: GPUBuffer[] = [];
  for (let v0 = 0; v0 < c.V; v0 += c.Vc) {
    const cols = Math.min(c.Vc, c.V - v0);
    const { data, ld } = chunkOf(logits, c, v0, cols);
    const b = gpu.upload(data);
    chunks.push(b);
    logprobsChunk(
      gpu,
      rec,
      { logits: b, targets: bt, stats: bstats, allow },
      { N: c.N, v0, cols, ld },
      { first: v0 === 0, temperature: c.T, wg: c.wg },
    );
  }
  logprobsFinalize(gpu, rec, { stats: bstats, logprob: blp, entropy: bent, lse: blse }, { N: c.N });
  const outs = [blp, bent, blse].map((b) => rec.read(b, c.N * 4));
  await rec.submit();
  const [lp, ent, lse] = (await Promise.all(outs)).map((b) => new Float32Array(b));
  // f32 on the GPU vs f64 on the CPU: a few ulps of |lse| (up to ~45 here).
  const tol = { atol: 2e-5 * c.scale, rtol: 1e-5 };
  assertClose("logprob", lp, ref.logprob, tol);
  assertClose("entropy", ent, ref.entropy, tol);
  assertClose("lse", lse, ref.lse, tol);

  // Backward, chunk by chunk, in place over the chunk buffers; with and without dentropy.
  for (const withEnt of [true, false]) {
    const [bd, bde] = [gpu.upload(dlogp), gpu.upload(dentropy)];
    const rec2 = gpu.recorder();
    const reads: Promise<ArrayBuffer>[] = [];
    chunks.forEach((b, k) => {
      const v0 = k * c.Vc;
      const cols = Math.min(c.Vc, c.V - v0);
      const { data, ld } = chunkOf(logits, c, v0, cols);
      gpu.write(b, data); // the engine recomputes the chunk's logits before its backward
      const bufs = {
        logits: b,
        targets: bt,
        lse: blse,
        entropy: bent,
        dlogp: bd,
        dentropy: withEnt ? bde : undefined,
        allow,
      };
      logprobsBackward(gpu, rec2, bufs, { N: c.N, v0, cols, ld }, { temperature: c.T });
      reads.push(rec2.read(b, data.byteLength));
    });
    await rec2.submit();
    const dlogits = new Float32Array(c.N * c.V);
    (await Promise.all(reads)).forEach((buf, k) => {
      const v0 = k * c.Vc;
      const cols = Math.min(c.Vc, c.V - v0);
      const d = new Float32Array(buf);
      const ld = c.padded ? c.Vc : cols;
      for (let n = 0; n < c.N; n++) dlogits.set(d.subarray(n * ld, n * ld + cols), n * c.V + v0);
    });
    const dref = logprobsBackwardReference(
      logits,
      targets,
      c.N,
      c.V,
      c.T,
      dlogp,
      withEnt ? dentropy : undefined,
      allowed,
    );
    assertClose(`dlogits (entropy grad ${withEnt})`, dlogits, dref, { atol: 2e-6 * c.scale, rtol: 1e-4 });
    gpu.release(bd, bde);
  }
  gpu.release(bt, bstats, blp, bent, blse, ...chunks, ...(allow ? [allow] : []));
  expect(gpu.errors).toEqual([]);
});

it("packAllowed: a header of offsets, each distinct mask once, ALLOW_ALL for rows without one", () => {
  const a = Uint32Array.of(1, 2);
  const b = Uint32Array.of(3, 4);
  const p = packAllowed([a, null, a, b, undefined], 2);
  expect([...p]).toEqual([5, ALLOW_ALL, 5, 7, ALLOW_ALL, 1, 2, 3, 4]);
  expect(() => packAllowed([Uint32Array.of(1)], 2)).toThrow("a mask has 1 words; the vocabulary needs 2");
});

it("an allowed set: logprob and entropy are the softmax over the set, and the rest gets no gradient", () => {
  const c: Case = { N: 4, V: 40, Vc: 40, T: 1, padded: false, scale: 2, masked: true };
  const { logits, targets, dlogp, allowed } = inputs(c, 11);
  const masked = logprobsReference(logits, targets, c.N, c.V, 1, allowed);
  const full = logprobsReference(logits, targets, c.N, c.V, 1);
  for (let n = 0; n < c.N; n++) {
    const a = allowed![n];
    // log p(t | set) = log p(t) - log p(set), from the full softmax.
    let pSet = 0;
    for (let j = 0; j < c.V; j++)
      if (!a || a[j >>> 5] & (1 << (j & 31))) pSet += Math.exp(logits[n * c.V + j] - full.lse[n]);
    expect(masked.logprob[n]).toBeCloseTo(full.logprob[n] - Math.log(pSet), 10);
    if (a) expect(masked.logprob[n]).toBeGreaterThan(full.logprob[n]);
  }
  const d = logprobsBackwardReference(logits, targets, c.N, c.V, 1, dlogp, undefined, allowed);
  const a0 = allowed![0]!;
  for (let j = 0; j < c.V; j++) if (!(a0[j >>> 5] & (1 << (j & 31)))) expect(d[j]).toBe(0);
});

it.each([
  [1, false],
  [0.6, false],
  [1, true],
  [0.6, true],
])("backward reference matches central finite differences (f64), T=%f, allowed sets %s", (T, masked) => {
  const c: Case = { N: 3, V: 7, Vc: 7, T, padded: false, scale: 2, masked };
  const { logits, targets, dlogp, dentropy, allowed } = inputs(c, 7);
  // Scalar loss: sum_n dlogp_n * logprob_n + dentropy_n * entropy_n.
  const loss = ([x]: Float64Array[]) => {
    const r = logprobsReference(x, targets, c.N, c.V, T, allowed);
    return dot(r.logprob, dlogp) + dot(r.entropy, dentropy);
  };
  const [fd] = finiteDiff(loss, [f64(logits)]);
  const analytic = logprobsBackwardReference(logits, targets, c.N, c.V, T, dlogp, dentropy, allowed);
  assertClose("dlogits vs finite differences", analytic, fd, { atol: 1e-7, rtol: 1e-6 });
  expect(Math.max(...fd.map(Math.abs))).toBeGreaterThan(0.01); // the check is not vacuous
});
