// Kernels bench for matmul and the decode matvec: GFLOP/s against the probe's FMA peak and against
// tfjs-backend-webgpu on the same adapter, robustness off and on, and matvec GB/s for f32 vs bf16.
// Every kernel's output is checked against the CPU reference before its time is reported.
import { findAdapter, type Gpu, type Recorder, Rng, packHalf, roundHalf } from "@webart/gpu";
import { MATMUL_VARIANTS, matmul, matmulVariant, type MatmulTuning, type MatmulVariant, matvec } from "@webart/shaders";
import { matmulReference, matvecReference } from "@webart/shaders/reference";
import { assertClose } from "@webart/gpu/check";
import { timeGpu, type BenchContext, type BenchResult, type Suite } from "../harness.ts";

const gflops = (n: number, ms: number) => (2 * n * n * n) / (ms * 1e6);

interface Square {
  n: number;
  a: Float32Array;
  b: Float32Array;
  want: Float32Array;
}

function square(n: number, seed: number): Square {
  const rng = new Rng(seed);
  const a = rng.f32(n * n);
  const b = rng.f32(n * n);
  const want = matmulReference(a, b, new Float32Array(n * n), { M: n, N: n, K: n });
  return { n, a, b, want };
}

// Sums of up to 1024 products of values in [-1, 1), accumulated in another order than the reference.
const MATMUL_TOL = { atol: 2e-4, rtol: 1e-4 };

/** A verified contender: `once()` runs one call and waits for it, returning ms; `done()` frees it. */
interface Timed {
  once(): Promise<number>;
  done(): void;
}

/** The engine's NN matmul on one device (the tuned variant, or `variant`), checked against the reference first. */
async function engineMatmul(gpu: Gpu, s: Square, variant?: MatmulVariant, tuning?: MatmulTuning): Promise<Timed> {
  const { n } = s;
  const [a, b, c] = [gpu.upload(s.a, "bench"), gpu.upload(s.b, "bench"), gpu.buffer(n * n * 4, "bench")];
  const [dims, o] = [
    { M: n, N: n, K: n },
    { variant, tuning },
  ];
  const rec = gpu.recorder();
  matmul(gpu, rec, { a, b, c }, dims, o);
  const out = rec.read(c, n * n * 4);
  await rec.submit();
  const name = `matmul.f32.${n} (${variant ?? matmulVariant(gpu, "nn", "f32", tuning)})`;
  assertClose(name, new Float32Array(await out), s.want, MATMUL_TOL);
  return {
    once: () =>
      timeGpu(gpu, (r) => matmul(gpu, r, { a, b, c }, dims, o), { warmup: 0, minReps: 1, minMs: 0, maxReps: 1 }),
    done: () => gpu.release(a, b, c),
  };
}

type Tf = typeof import("@tensorflow/tfjs-core");

/**
 * tfjs-backend-webgpu on the same Dawn instance (hence adapter and flags) as `gpu`: tfjs asks
 * navigator.gpu for its adapter, which Node lacks, so Dawn's GPU object is put there first.
 */
async function loadTfjs(gpu: Gpu): Promise<Tf> {
  const { gpu: dawn } = await findAdapter({ robustness: gpu.kind.robustness });
  const g = globalThis as { navigator?: { gpu?: GPU } };
  if (!g.navigator) Object.defineProperty(globalThis, "navigator", { value: {}, configurable: true, writable: true });
  if (g.navigator!.gpu !== dawn) Object.defineProperty(g.navigator!, "gpu", { value: dawn, configurable: true });
  const tf = await import("@tensorflow/tfjs-core");
  await import("@tensorflow/tfjs-backend-webgpu"); // registers "webgpu" now that navigator.gpu exists
  tf.env().set("WEBGPU_CPU_FORWARD", false); // keep small work on the GPU too
  if (!(await tf.setBackend("webgpu"))) throw new Error("tfjs: the webgpu backend failed to initialise");
  await tf.ready();
  return tf;
}

/** tf.matMul, checked against the reference first; each call syncs with tfjs's own download. */
async function tfjsMatmul(tf: Tf, s: Square): Promise<Timed> {
  const { n } = s;
  const a = tf.tensor2d(s.a, [n, n]);
  const b = tf.tensor2d(s.b, [n, n]);
  const run = async () => {
    const t0 = performance.now();
    const c = tf.matMul(a, b);
    const got = (await c.data()) as Float32Array;
    const ms = performance.now() - t0;
    c.dispose();
    return { ms, got };
  };
  assertClose(`tfjs.matmul.f32.${n}`, (await run()).got, s.want, MATMUL_TOL); // also uploads and compiles
  return {
    once: async () => (await run()).ms,
    done: () => tf.dispose([a, b]),
  };
}

const median = (t: number[]) => [...t].sort((x, y) => x - y)[Math.floor(t.length / 2)];

/**
 * Median ms per call of each contender, timed in alternating rounds after one warm-up call each, and each
 * contender's time over the first's as the median of the rounds' ratios: a change in machine load (other work on
 * the same cores) hits both sides of a round alike, so it skews neither the ratios nor their median.
 */
async function alternate(contenders: Timed[], rounds: number): Promise<{ ms: number[]; vsFirst: number[] }> {
  for (const c of contenders) await c.once();
  const times: number[][] = contenders.map(() => []);
  for (let r = 0; r < rounds; r++) {
    for (const [i, c] of contenders.entries()) times[i].push(await c.once());
  }
  for (const c of contenders) c.done();
  return { ms: times.map(median), vsFirst: times.map((t) => median(t.map((v, r) => v / times[0][r]))) };
}

/**
 * Verifies, then times y = x·Wᵀ for W (N, K) in f32 and in bf16; ms per call for each. The two are
 * timed in alternating rounds so a change in machine load between them does not skew their ratio.
 */
async function timeMatvecs(gpu: Gpu, M: number, N: number, K: number, quick: boolean) {
  const rng = new Rng(7);
  const w = rng.f32(N * K);
  const xv = rng.f32(M * K);
  const [x, y] = [gpu.upload(xv, "bench"), gpu.buffer(M * N * 4, "bench")];
  const kinds = ["f32", "bf16"] as const;
  const ws = kinds.map((d) => gpu.upload(d === "f32" ? w : packHalf(w, d), "bench"));
  for (const [i, wDtype] of kinds.entries()) {
    const o = { M, N, K, wDtype };
    const rec = gpu.recorder();
    matvec(gpu, rec, { x, w: ws[i], y }, { M, N, K }, { wDtype });
    const out = rec.read(y, M * N * 4);
    await rec.submit();
    const want = matvecReference(xv, wDtype === "f32" ? w : roundHalf(w, wDtype), new Float32Array(M * N), o);
    assertClose(`matvec.${wDtype}.${K}x${N}.b${M}`, new Float32Array(await out), want, MATMUL_TOL);
  }
  // Several calls per submit (about 60 ms of work), so thread wake-up latency is amortised.
  const one = (i: number) => (r: Recorder) => matvec(gpu, r, { x, w: ws[i], y }, { M, N, K }, { wDtype: kinds[i] });
  const reps: number[] = [];
  for (const i of [0, 1]) {
    const ms = await timeGpu(gpu, one(i), { minReps: 1, minMs: 0, maxReps: 1 });
    reps.push(Math.max(1, Math.min(50, Math.ceil(60 / ms))));
  }
  const times: number[][] = [[], []];
  for (let round = 0; round < (quick ? 1 : 9); round++) {
    for (const i of [0, 1]) {
      const record = (r: Recorder) => {
        for (let k = 0; k < reps[i]; k++) one(i)(r);
      };
      times[i].push((await timeGpu(gpu, record, { minMs: quick ? 20 : 150, maxReps: 10 })) / reps[i]);
    }
  }
  gpu.release(x, y, ...ws);
  // The ratio is the median of the rounds' ratios (see alternate()).
  return { f32: median(times[0]), bf16: median(times[1]), ratio: median(times[0].map((t, r) => t / times[1][r])) };
}

export const matmulSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const results: BenchResult[] = [];
  const sizes = ctx.quick ? [128] : [512, 1024];
  const peak = ctx.peak.fma_gflops;
  const robust = await ctx.device({ robustness: true });
  // The comparison is optional: a missing or broken tfjs leaves the engine's own figures.
  const tf = await loadTfjs(ctx.gpu).catch((e: Error) => void ctx.log(`tfjs unavailable, no comparison: ${e.message}`));
  for (const n of sizes) {
    const s = square(n, n);
    const tuned = ctx.tuning?.matmul;
    const contenders = [await engineMatmul(ctx.gpu, s, undefined, tuned), await engineMatmul(robust, s)];
    if (tf) contenders.push(await tfjsMatmul(tf, s));
    const t = await alternate(contenders, ctx.quick ? 1 : n >= 1024 ? 5 : 7);
    const [ms, rMs] = t.ms;
    const tfMs: number | undefined = t.ms[2];
    const v = gflops(n, ms);
    const tfId = `tfjs.matmul.f32.${n}`;
    results.push(
      {
        id: `matmul.f32.${n}`,
        value: v,
        unit: "GFLOP/s",
        fraction_of_peak: v / peak,
        ...(tfMs !== undefined ? { vs: { id: tfId, ratio: t.vsFirst[2] } } : {}),
        note: `${ms.toFixed(1)} ms, ${matmulVariant(ctx.gpu, "nn", "f32", tuned)}`,
      },
      {
        id: `matmul.f32.${n}.robust`,
        value: gflops(n, rMs),
        unit: "GFLOP/s",
        fraction_of_peak: gflops(n, rMs) / peak,
        note: `${rMs.toFixed(1)} ms, robustness on, ${matmulVariant(robust)}`,
      },
    );
    if (tfMs !== undefined) {
      const tv = gflops(n, tfMs);
      results.push({
        id: tfId,
        value: tv,
        unit: "GFLOP/s",
        fraction_of_peak: tv / peak,
        note: `${tfMs.toFixed(1)} ms incl. download`,
      });
    }
    ctx.log(`matmul ${n}: engine ${ms.toFixed(1)} ms, robust ${rMs.toFixed(1)} ms, tfjs ${tfMs?.toFixed(1) ?? "-"} ms`);
    // The variants start-up tuning passed over, each against the chosen one in alternating rounds.
    const chosen = matmulVariant(ctx.gpu, "nn", "f32", tuned);
    for (const variant of MATMUL_VARIANTS.filter((v) => v !== chosen)) {
      const other = await alternate(
        [await engineMatmul(ctx.gpu, s, undefined, tuned), await engineMatmul(ctx.gpu, s, variant)],
        ctx.quick ? 1 : 2,
      );
      const ov = gflops(n, other.ms[1]);
      results.push({
        id: `matmul.f32.${n}.${variant}`,
        value: ov,
        unit: "GFLOP/s",
        fraction_of_peak: ov / peak,
        vs: { id: `matmul.f32.${n}`, ratio: 1 / other.vsFirst[1] },
        note: `${other.ms[1].toFixed(1)} ms; vs ratio = ${chosen} time / ${variant} time`,
      });
    }
  }
  tf?.engine().reset(); // frees tfjs's GPU memory; its device stays idle

  // Decode projections of a Qwen2.5-0.5B MLP: W (4864, 896), K = 896.
  const [N, K] = ctx.quick ? [512, 256] : [4864, 896];
  for (const M of [1, 8]) {
    const { f32: f32Ms, bf16: bfMs, ratio } = await timeMatvecs(ctx.gpu, M, N, K, ctx.quick);
    const gbps = (bytes: number, ms: number) => (bytes + M * (N + K) * 4) / (ms * 1e6);
    const f32Id = `matvec.f32.${K}x${N}.b${M}`;
    results.push(
      { id: f32Id, value: gbps(N * K * 4, f32Ms), unit: "GB/s", note: `${f32Ms.toFixed(3)} ms` },
      {
        id: `matvec.bf16.${K}x${N}.b${M}`,
        value: gbps(N * K * 2, bfMs),
        unit: "GB/s",
        vs: { id: f32Id, ratio },
        note: `${bfMs.toFixed(3)} ms; vs ratio = f32 time / bf16 time, median of ${ctx.quick ? 1 : 9} rounds`,
      },
    );
  }
  return results;
};

export default matmulSuite;
