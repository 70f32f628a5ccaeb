// `npm run bench -- gpu`: the problems a real GPU is judged on, each checked before it is timed.
// - matmul 4096³ (f32 B in nn, bf16 B in nt as the model's projections run), every variant this device has,
//   as a fraction of the probe's FMA peak; the tensor-core (coop) variant against the best f32 one;
// - the decode matvec's variants on Qwen2.5-0.5B's projections, batch 1 and 8, against the copy bandwidth;
// - real model shapes at full depth with random bf16 weights (Qwen2.5-0.5B, Qwen3-0.6B, Qwen2.5-1.5B): decode
//   tokens/s at batch 1, 8 and 32 (batch 1 against the copy-bandwidth roofline: weight bytes a token over the
//   probe's copy bandwidth), prefill tokens/s, and a LoRA GRPO step of 8 × 512 tokens (time, tokens/s, peak memory).
// WEBART_BENCH_MODELS=a,b picks models; --quick runs small sizes (a CPU device gets those anyway).
import {
  DEFAULT_LORA,
  Engine,
  LORA_TARGETS,
  LoraState,
  loraGradients,
  measureGrpoStep,
  ModelRunner,
  parseConfig,
  planMemory,
  type Model,
} from "@webart/engine";
import { isCpuDevice, packHalf, roundHalf, Rng, type Gpu } from "@webart/gpu";
import {
  add,
  COOP_STAGINGS,
  coopConfig,
  coopShapes,
  type CoopShape,
  type CoopStagingChoice,
  MATMUL_VARIANTS,
  matmul,
  type MatmulMode,
  type MatmulVariant,
  matvec,
  matvecVariants,
  type WeightDtype,
  DECODE_ROWS_MAX,
  attentionVariant,
  lanesWidth,
} from "@webart/shaders";
import { matmulReference, matvecReference } from "@webart/shaders/reference";
import { AHEAD, aheadResult, decodeRun, hotEncodeMs, nativeEncodeMs, sampleSpec } from "./generate.ts";
import { timeGpu, type BenchContext, type BenchResult, type Suite } from "./harness.ts";
import { configJson, randomModelFiles } from "./models.ts";

/** The real shapes this suite runs at full depth (REAL in models.ts). */
const MODELS = ["qwen2.5-0.5b", "qwen3-0.6b", "qwen2.5-1.5b"];
const GiB = 2 ** 30;

/** ‖got − want‖ / ‖want‖. */
function relErr(got: Float32Array, want: Float32Array): number {
  let d = 0;
  let w = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(got[i])) return Infinity;
    d += (got[i] - want[i]) ** 2;
    w += want[i] ** 2;
  }
  return Math.sqrt(d / w);
}

interface Case {
  mode: MatmulMode;
  bDtype: WeightDtype;
}

type Shape = CoopShape | undefined;

/**
 * Checks one variant against the CPU reference on an odd-sized problem with a bias and a poisoned C (edges, the
 * staged epilogue), or with `accumulate` on an aligned one (C += A·B: coop's whole blocks load and store C straight
 * from the matrices). The reference sees the operands as the kernel does: B rounded to its storage, for coop A and B
 * in f16. Returns ‖got − want‖ / ‖want‖.
 */
async function checkVariant(
  gpu: Gpu,
  variant: MatmulVariant,
  { mode, bDtype }: Case,
  coopShape: Shape,
  accumulate: boolean,
  coopStaging?: CoopStagingChoice,
): Promise<number> {
  const [M, N, K] = accumulate ? [128, 256, 96] : [131, 197, 160];
  const rng = new Rng(accumulate ? 12 : 11);
  const av = rng.f32(M * K);
  const bv = rng.f32(N * K);
  const c0 = accumulate ? rng.f32(M * N) : new Float32Array(M * N).fill(NaN);
  const bias = accumulate ? undefined : rng.f32(N);
  const coop = variant === "coop";
  const bEff = bDtype === "f32" ? bv : roundHalf(bv, bDtype);
  const want = matmulReference(
    coop ? roundHalf(av, "f16") : av,
    coop ? roundHalf(bEff, "f16") : bEff,
    accumulate ? c0.slice() : new Float32Array(M * N),
    { M, N, K, transB: mode[1] === "t", accumulate },
    bias,
  );
  const a = gpu.upload(av, "bench");
  const b = gpu.upload(bDtype === "f32" ? bv : packHalf(bv, bDtype), "bench");
  const bb = bias && gpu.upload(bias, "bench");
  const c = gpu.upload(c0, "bench");
  try {
    const rec = gpu.recorder();
    matmul(gpu, rec, { a, b, c, bias: bb }, { M, N, K }, { mode, bDtype, variant, coopShape, coopStaging, accumulate });
    const out = rec.read(c, M * N * 4);
    await rec.submit();
    return relErr(new Float32Array(await out), want);
  } finally {
    gpu.release(a, b, bb, c);
  }
}

/** How far one batch's LoRA gradients with `got` applied are from those with `ref` applied (relative L2, cosine), on
 *  a random adapter (PEFT's B = 0 would leave dA zero). */
async function loraGradsApart(
  engine: Engine,
  o: Parameters<typeof measureGrpoStep>[1],
  ref: () => void,
  got: () => void,
): Promise<{ rel: number; cos: number }> {
  const lora = engine.model.lora!;
  lora.write(new Rng(9).f32(lora.size, -0.02, 0.02));
  ref();
  const r = (await loraGradients(engine, o)).grads;
  got();
  const g = (await loraGradients(engine, o)).grads;
  let [dd, rr, gr, gg] = [0, 0, 0, 0];
  for (let i = 0; i < r.length; i++)
    [dd, rr, gr, gg] = [dd + (g[i] - r[i]) ** 2, rr + r[i] ** 2, gr + g[i] * r[i], gg + g[i] ** 2];
  return { rel: Math.sqrt(dd / rr), cos: gr / Math.sqrt(rr * gg) };
}

/**
 * Tensor cores in backward too (EngineOptions.tensorCoresBackward): the GRPO step's time against tensor cores in the
 * forward only (`forwardMs`), and how far its LoRA gradients are from the f32 backward's on one batch, with a random
 * B (PEFT's B = 0 would leave dA zero).
 */
async function tensorCoresBackward(
  ctx: BenchContext,
  engine: Engine,
  id: string,
  o: Parameters<typeof measureGrpoStep>[1],
  forwardMs: number,
  out: BenchResult[],
): Promise<void> {
  const model = engine.model;
  try {
    model.tensorCoresBackward = true;
    await measureGrpoStep(engine, o); // compiles
    const back = await measureGrpoStep(engine, o);
    const { rel, cos } = await loraGradsApart(
      engine,
      o,
      () => void (model.tensorCoresBackward = false),
      () => void (model.tensorCoresBackward = true),
    );
    out.push({
      id: `${id}.tensor_cores_backward`,
      value: back.ms / 1000,
      unit: "s",
      vs: { id: "tensor cores in the forward only", ratio: forwardMs / back.ms },
      note: `peak ${(back.peak / GiB).toFixed(2)} GiB; LoRA gradients vs the f32 backward: relative L2 error ${rel.toExponential(2)}, cosine ${cos.toFixed(6)}`,
    });
    ctx.log(
      `${id} with tensor cores in backward: ${(back.ms / 1000).toFixed(2)} s (forward only ${(forwardMs / 1000).toFixed(2)} s); ` +
        `LoRA gradients: relative error ${rel.toExponential(2)}, cosine ${cos.toFixed(6)}`,
    );
  } catch (e) {
    ctx.log(`${id} with tensor cores in backward: failed: ${(e as Error).message}`);
  } finally {
    model.tensorCoresBackward = false;
  }
}

/** The GRPO step's least time with a setting the other way (`use(false)`) and the engine's way (`use(true)`, left so),
 *  each compiled first, then rounds alternating. */
async function grpoAlternating(
  engine: Engine,
  o: Parameters<typeof measureGrpoStep>[1],
  use: (dflt: boolean) => void,
): Promise<{ other: number; dflt: number }> {
  const ms = { other: Infinity, dflt: Infinity };
  for (const d of [false, true]) {
    use(d);
    await measureGrpoStep(engine, o); // compiles
  }
  for (let round = 0; round < 2; round++)
    for (const d of [false, true]) {
      use(d);
      const t = (await measureGrpoStep(engine, o)).ms;
      if (d) ms.dflt = Math.min(ms.dflt, t);
      else ms.other = Math.min(ms.other, t);
    }
  return ms;
}

/** The GRPO step with its forward submitted once (Model.submitLayers 0, as training ran until 2026-11-28) against
 *  the engine's part-way submits, rounds alternating. */
async function trainingSubmits(
  ctx: BenchContext,
  engine: Engine,
  id: string,
  o: Parameters<typeof measureGrpoStep>[1],
  out: BenchResult[],
): Promise<void> {
  const model = engine.model;
  const k = model.submitLayers;
  if (!k) return;
  try {
    const ms = await grpoAlternating(engine, o, (d) => void (model.submitLayers = d ? k : 0));
    out.push({
      id: `${id}.submit_once`,
      value: ms.other / 1000,
      unit: "s",
      vs: { id: `the forward submitted after the first layer and every ${k}`, ratio: ms.other / ms.dflt },
      note: `GRPO step (activations kept) with the forward recorded whole before its first submit; ratio: over part-way submits (${(ms.dflt / 1000).toFixed(3)} s), rounds alternating`,
    });
    ctx.log(
      `${id} forward submitted once ${(ms.other / 1000).toFixed(3)} s, part-way ${(ms.dflt / 1000).toFixed(3)} s`,
    );
  } catch (e) {
    ctx.log(`${id} forward submitted once: failed: ${(e as Error).message}`);
  } finally {
    model.submitLayers = k;
  }
}

/**
 * Models with per-head q/k norms (Qwen3, Gemma 3): the GRPO step with q, k and v as three products, their norms and
 * RoPE apart (Model.fuseQkv off, as training ran them until 2026-11-28), against one product with the norms in
 * ropeQkv (the default), rounds alternating; and the two's LoRA gradients on one batch.
 */
async function qkvApart(
  ctx: BenchContext,
  engine: Engine,
  id: string,
  o: Parameters<typeof measureGrpoStep>[1],
  out: BenchResult[],
): Promise<void> {
  const model = engine.model;
  if (!model.config.qkNorm) return;
  try {
    const use = (fused: boolean) => void (model.fuseQkv = fused);
    const ms = await grpoAlternating(engine, o, use);
    const { rel } = await loraGradsApart(
      engine,
      o,
      () => use(false),
      () => use(true),
    );
    out.push({
      id: `${id}.qkv_apart`,
      value: ms.other / 1000,
      unit: "s",
      vs: { id: "q|k|v as one product, norms in ropeQkv", ratio: ms.other / ms.dflt },
      note: `GRPO step with q, k and v as three products and their norms apart; ratio: over one product (${(ms.dflt / 1000).toFixed(3)} s), rounds alternating; LoRA gradients one product vs apart: relative L2 ${rel.toExponential(2)}`,
    });
    ctx.log(
      `${id} q|k|v apart ${(ms.other / 1000).toFixed(3)} s, one product ${(ms.dflt / 1000).toFixed(3)} s; LoRA gradients: relative L2 ${rel.toExponential(2)}`,
    );
  } catch (e) {
    ctx.log(`${id} q|k|v apart: failed: ${(e as Error).message}`);
  } finally {
    model.fuseQkv = true;
  }
}

/**
 * The GRPO step and a prefill (PB prompts of PT tokens) with training's attention as the tiled family and as the lanes family (where
 * the device has subgroups), rounds alternating, everything else as tuned; the LoRA gradients of one batch with
 * lanes against tiled. Start-up tuning's choice is in the note.
 */
async function attentionFamilies(
  ctx: BenchContext,
  engine: Engine,
  id: string,
  o: Parameters<typeof measureGrpoStep>[1],
  [PB, PT]: [number, number],
  out: BenchResult[],
): Promise<void> {
  const model = engine.model;
  const tuned = model.tuning.attention;
  const chose = attentionVariant(engine.gpu, model.config.headDim, "train", tuned);
  if (lanesWidth(engine.gpu, model.config.headDim) === undefined) {
    ctx.log(`${id} attention families: the lanes family cannot run here (no subgroups of a known size)`);
    return;
  }
  const use = (variant: "tiled" | "lanes") =>
    (model.tuning.attention = { ...tuned, train: { variant, profile: "gpu" } });
  const families = ["tiled", "lanes"] as const;
  try {
    const ms = { tiled: Infinity, lanes: Infinity };
    const prefill = { tiled: 0, lanes: 0 };
    for (const f of families) {
      use(f);
      await measureGrpoStep(engine, o); // compiles
    }
    for (let round = 0; round < 2; round++)
      for (const f of families) {
        use(f);
        ms[f] = Math.min(ms[f], (await measureGrpoStep(engine, o)).ms);
        prefill[f] = Math.max(prefill[f], (await decodeRun(engine.gpu, model, PB, PT, 0)).prefill);
      }
    const { rel } = await loraGradsApart(
      engine,
      o,
      () => use("tiled"),
      () => use("lanes"),
    );
    const note = `GRPO step with training's attention as the tiled family; ratio: over the lanes family (${(ms.lanes / 1000).toFixed(3)} s), rounds alternating; start-up tuning chose ${chose}; LoRA gradients lanes vs tiled: relative L2 ${rel.toExponential(2)}`;
    out.push({
      id: `${id}.attention_tiled`,
      value: ms.tiled / 1000,
      unit: "s",
      vs: { id: "the lanes family", ratio: ms.tiled / ms.lanes },
      note,
    });
    out.push({
      id: `${id.replace(/\.grpo_.*/, "")}.prefill.attention_tiled`,
      value: prefill.tiled,
      unit: "tok/s",
      vs: { id: "the lanes family", ratio: prefill.lanes / prefill.tiled },
      note: `${PB} prompts of ${PT} tokens with training's attention as the tiled family; ratio: the lanes family (${prefill.lanes.toFixed(0)} tok/s) over this`,
    });
    ctx.log(
      `${id} attention families: GRPO step tiled ${(ms.tiled / 1000).toFixed(3)} s, lanes ${(ms.lanes / 1000).toFixed(3)} s; ` +
        `prefill ${PB}x${PT} tiled ${prefill.tiled.toFixed(0)} tok/s, lanes ${prefill.lanes.toFixed(0)} tok/s; tuning chose ${chose}; ` +
        `LoRA gradients lanes vs tiled: relative L2 ${rel.toExponential(2)}`,
    );
  } catch (e) {
    ctx.log(`${id} attention families: failed: ${(e as Error).message}`);
  } finally {
    model.tuning.attention = tuned;
  }
}

async function matmulPart(ctx: BenchContext, out: BenchResult[]): Promise<void> {
  const gpu = ctx.gpu;
  const n = ctx.quick || isCpuDevice(gpu) ? 256 : 4096;
  const reps = n >= 2048 ? 4 : 1;
  const variants: [MatmulVariant, Shape, CoopStagingChoice?][] = MATMUL_VARIANTS.filter(
    (v) => !(n >= 2048 && v === "regblock"),
  ).map((v) => [v, undefined]);
  const coop = coopConfig(gpu);
  ctx.log(`subgroup matrices: ${JSON.stringify(gpu.subgroupMatrixConfigs)}; subgroupMaxSize ${gpu.subgroupMaxSize}`);
  // Each coop shape with its operands staged an element a load, then 16 bytes a load.
  if (coop) for (const shape of coopShapes(gpu)) for (const st of COOP_STAGINGS) variants.push(["coop", shape, st]);
  else ctx.log(`coop: not available on this device (features: ${[...gpu.features].sort().join(", ")})`);
  const rng = new Rng(3);
  const av = rng.f32(n * n);
  const bv = rng.f32(n * n);
  for (const cs of [
    { mode: "nn", bDtype: "f32" },
    { mode: "nt", bDtype: "bf16" },
  ] as Case[]) {
    const a = gpu.upload(av, "bench");
    const b = gpu.upload(cs.bDtype === "f32" ? bv : packHalf(bv, cs.bDtype), "bench");
    const c = gpu.buffer(n * n * 4, "bench");
    let bestF32 = 0;
    const scalarCoop = new Map<Shape, number>();
    try {
      for (const [variant, coopShape, coopStaging] of variants) {
        const vec = coopStaging === "vec" ? "+vec" : "";
        const id = `gpu.matmul.${cs.mode}.${cs.bDtype}.${n}.${variant}${coopShape ? `.${coopShape}${vec}` : ""}`;
        let err: number;
        let errAcc: number;
        try {
          err = await checkVariant(gpu, variant, cs, coopShape, false, coopStaging);
          errAcc = await checkVariant(gpu, variant, cs, coopShape, true, coopStaging);
        } catch (e) {
          ctx.log(`${id}: failed: ${(e as Error).message}`);
          continue;
        }
        // f32 variants differ from the reference only in summation order; coop's reference has its f16 operands,
        // and tensor cores may round their f32 sums more coarsely.
        const tol = variant === "coop" ? 1e-3 : 1e-5;
        if (!(err < tol && errAcc < tol)) {
          ctx.log(`${id}: WRONG (relative error ${err.toExponential(2)}, accumulate ${errAcc.toExponential(2)})`);
          out.push({ id, value: 0, unit: "GFLOP/s", note: `wrong: relative error ${err.toExponential(2)}` });
          continue;
        }
        const ms =
          (await timeGpu(
            gpu,
            (rec) => {
              for (let r = 0; r < reps; r++)
                matmul(gpu, rec, { a, b, c }, { M: n, N: n, K: n }, { ...cs, variant, coopShape, coopStaging });
            },
            { minMs: 300, maxReps: 20 },
          )) / reps;
        const gf = (2 * n ** 3) / (ms * 1e6);
        if (variant !== "coop") bestF32 = Math.max(bestF32, gf);
        if (variant === "coop" && !vec) scalarCoop.set(coopShape, gf);
        const overScalar =
          vec && scalarCoop.get(coopShape) ? `; ${(gf / scalarCoop.get(coopShape)!).toFixed(2)}x scalar staging` : "";
        out.push({
          id,
          value: gf,
          unit: "GFLOP/s",
          ...(variant === "coop"
            ? { vs: { id: `best f32 variant`, ratio: gf / bestF32 } }
            : { fraction_of_peak: gf / ctx.peak.fma_gflops }),
          note: `${ms.toFixed(3)} ms; checked: relative error ${err.toExponential(1)} (${variant === "coop" ? "f16 operands" : "f32"})${overScalar}`,
        });
        ctx.log(`${id}: ${gf.toFixed(0)} GFLOP/s (${ms.toFixed(3)} ms), error ${err.toExponential(1)}${overScalar}`);
      }
    } finally {
      gpu.release(a, b, c);
    }
  }
}

/**
 * The decode matvec's variants on Qwen2.5-0.5B's decode projections (bf16 W; a CPU device gets them at a quarter
 * of each side): each checked against the CPU reference, then timed 8 calls a submit, as GB/s of W and x read and
 * y written, against the probe's copy bandwidth.
 */
async function matvecPart(ctx: BenchContext, out: BenchResult[]): Promise<void> {
  const gpu = ctx.gpu;
  const small = ctx.quick || isCpuDevice(gpu);
  const shapes: [string, number, number][] = [
    ["qkv", 1152, 896],
    ["o", 896, 896],
    ["gate_up", 9728, 896],
    ["down", 896, 4864],
    ["lm_head", 151936, 896],
  ];
  const rng = new Rng(5);
  // On GPUs, each call's GPU time by timestamps too, on a profiling device (a pass per dispatch): the host-timed
  // figure includes the host's gaps between submits, and the H200 lowers its clock when idle.
  const pg = small ? undefined : await ctx.device({ profile: true });
  const stamped = pg?.profiling ? pg : undefined;
  for (const [name, N0, K0] of small ? shapes.slice(0, 4) : shapes) {
    const [N, K] = small ? [N0 / 4, K0 / 4] : [N0, K0];
    const wv = rng.f32(N * K);
    const w = gpu.upload(packHalf(wv, "bf16"), "bench");
    const pw = stamped?.upload(packHalf(wv, "bf16"), "bench");
    for (const M of [1, 8, 32]) {
      const xv = rng.f32(M * K);
      const [x, y] = [gpu.upload(xv, "bench"), gpu.buffer(M * N * 4, "bench")];
      const px = stamped && { x: stamped.upload(xv, "bench"), w: pw!, y: stamped.buffer(M * N * 4, "bench") };
      const want = matvecReference(xv, roundHalf(wv, "bf16"), new Float32Array(M * N), { M, N, K });
      try {
        for (const variant of matvecVariants(gpu)) {
          const id = `gpu.matvec.${name}.${N}x${K}.b${M}.${variant}`;
          let ran: string;
          let err: number;
          try {
            const rec = gpu.recorder();
            ran = matvec(gpu, rec, { x, w, y }, { M, N, K }, { wDtype: "bf16", variant });
            const got = rec.read(y, M * N * 4);
            await rec.submit();
            err = relErr(new Float32Array(await got), want);
          } catch (e) {
            ctx.log(`${id}: failed: ${(e as Error).message}`); // one variant's failure leaves the others measured
            continue;
          }
          if (!(err < 1e-5) || ran !== variant) {
            ctx.log(`${id}: WRONG (relative error ${err.toExponential(2)}, ran ${ran})`);
            out.push({ id, value: 0, unit: "GB/s", note: `wrong: relative error ${err.toExponential(2)}` });
            continue;
          }
          const ms =
            (await timeGpu(
              gpu,
              (r) => {
                for (let i = 0; i < 8; i++) matvec(gpu, r, { x, w, y }, { M, N, K }, { wDtype: "bf16", variant });
              },
              { minMs: small ? 20 : 100, maxReps: 20 },
            )) / 8;
          const bytes = N * K * 2 + M * (N + K) * 4;
          const gbps = bytes / (ms * 1e6);
          let gpuTime = "";
          if (stamped && px) {
            const calls = async () => {
              const rec = stamped.recorder();
              for (let i = 0; i < 8; i++) matvec(stamped, rec, px, { M, N, K }, { wDtype: "bf16", variant });
              await rec.submit();
              await stamped.sync();
            };
            await calls(); // compiles
            stamped.profile.clear();
            for (let r = 0; r < 4; r++) await calls();
            const row = stamped.profileTable().find((e) => e.name.startsWith("matvec"));
            if (row) {
              const us = (1000 * row.ms) / row.count;
              gpuTime = `; by GPU timestamps ${us.toFixed(1)} us a call, ${(bytes / (us * 1e3)).toPrecision(3)} GB/s`;
            }
            stamped.profile.clear();
          }
          out.push({
            id,
            value: gbps,
            unit: "GB/s",
            fraction_of_peak: gbps / ctx.peak.copy_gbps,
            note: `${(ms * 1000).toFixed(1)} us a call (8 a submit); of the probe's copy bandwidth${gpuTime}`,
          });
          ctx.log(`${id}: ${gbps.toPrecision(3)} GB/s (${(ms * 1000).toFixed(1)} us${gpuTime})`);
        }
      } finally {
        gpu.release(x, y);
        if (px) stamped!.release(px.x, px.y);
      }
    }
    gpu.release(w);
    if (pw) stamped!.release(pw);
  }
}

/** The fixed cost of a step: 150 tiny dispatches (as many as a decode step of a 24-layer model) in one submit,
 *  then a 4-byte read back, timed on the host from the first dispatch recorded to the read resolved. */
async function overheadPart(ctx: BenchContext, out: BenchResult[]): Promise<void> {
  const gpu = ctx.gpu;
  const n = 256;
  const [a, b, y] = [
    gpu.upload(new Float32Array(n).fill(1)),
    gpu.upload(new Float32Array(n).fill(2)),
    gpu.buffer(n * 4),
  ];
  const D = 150;
  const once = async () => {
    const t0 = performance.now();
    const rec = gpu.recorder();
    for (let i = 0; i < D; i++) add(gpu, rec, { a, b, y }, { n });
    const enc = performance.now() - t0;
    const r = rec.read(y, 4);
    await rec.submit();
    await r;
    return { enc, total: performance.now() - t0 };
  };
  for (let i = 0; i < 3; i++) await once();
  const runs: { enc: number; total: number }[] = [];
  for (let i = 0; i < 20; i++) runs.push(await once());
  const med = (f: (x: { enc: number; total: number }) => number) => runs.map(f).sort((x, z) => x - z)[10];
  gpu.release(a, b, y);
  const total = med((r) => r.total);
  const enc = med((r) => r.enc);
  out.push({
    id: "gpu.step_overhead.150_dispatches",
    value: total,
    unit: "ms",
    note: `${enc.toFixed(2)} ms encoding (${((1000 * enc) / D).toFixed(1)} us a dispatch), the rest submit, GPU and read back`,
  });
  ctx.log(`150 tiny dispatches + read back: ${total.toFixed(2)} ms, of which ${enc.toFixed(2)} ms encoding`);
}

/** The top-20 logprobs after 4 random prompts of 64 tokens, with tensor cores on and off: the largest difference. */
async function tensorCoreLogprobs(model: Model): Promise<number> {
  const V = model.config.vocabSize;
  const [B, P] = [4, 64];
  const rng = new Rng(5);
  const ids = new Uint32Array(B * P).map(() => rng.int(V));
  const run = async (on: boolean) => {
    const before = model.tensorCores;
    model.tensorCores = on;
    const runner = new ModelRunner(model, B, P + 1);
    try {
      const r = await runner.step(
        {
          ids,
          slots: new Uint32Array(B * P).map((_, i) => Math.floor(i / P)),
          pos: new Uint32Array(B * P).map((_, i) => i % P),
        },
        Array.from({ length: B }, (_, b) => sampleSpec(b * P + P - 1, b, 0, 20)),
      );
      return r.top!;
    } finally {
      runner.dispose();
      model.tensorCores = before;
    }
  };
  const [on, off] = [await run(true), await run(false)];
  let worst = 0;
  for (let b = 0; b < B; b++) {
    const ref = new Map(off[b].map((t) => [t.tokenId, t.logprob]));
    for (const t of on[b]) {
      const r = ref.get(t.tokenId);
      if (r !== undefined) worst = Math.max(worst, Math.abs(t.logprob - r));
    }
  }
  return worst;
}

async function modelPart(ctx: BenchContext, out: BenchResult[]): Promise<void> {
  const small = ctx.quick || isCpuDevice(ctx.gpu);
  const only = process.env.WEBART_BENCH_MODELS?.split(",").map((s) => s.trim());
  const names = MODELS.filter((n) => (only ? only.includes(n) : small ? n === "qwen2.5-0.5b" : true));
  const [B, T] = small ? [2, 32] : [8, 512];
  for (const name of names) {
    const json = configJson(name, small ? 2 : undefined);
    // WEBART_BENCH_Q4: "off" leaves out the q4 figures, "only" the 16-bit ones (the q4 ratios then have no 16-bit
    // figure to compare with).
    const q4 = process.env.WEBART_BENCH_Q4 ?? "on";
    if (q4 !== "only")
      try {
        await oneModel(ctx, out, name, json, small, B, T);
      } catch (e) {
        ctx.log(`${name}: failed: ${(e as Error).stack ?? e}`);
      }
    if (q4 !== "off")
      try {
        await q4Model(ctx, out, name, json, small, B, T);
      } catch (e) {
        ctx.log(`${name} q4: failed: ${(e as Error).stack ?? e}`);
      }
  }
}

async function oneModel(
  ctx: BenchContext,
  out: BenchResult[],
  name: string,
  json: Record<string, unknown>,
  small: boolean,
  B: number,
  T: number,
): Promise<void> {
  const gpu = ctx.gpu;
  // A decode A/B of whole steps at batch b, alternating (decodeRun's `ab`): the perOp side is the result
  // (gpu.<model>.decode.b<b>.<what>), the fused side the ratio's numerator (gpu.<model>.decode.b<b><vs>).
  const pushAb = (b: number, what: string, vs: string, ab: { fused: number; perOp: number }, note: string) => {
    const at = `gpu.${name}.decode.b${b}`;
    out.push({
      id: `${at}.${what}`,
      value: ab.perOp,
      unit: "tok/s",
      vs: { id: `${at}${vs}`, ratio: ab.fused / ab.perOp },
      note,
    });
    ctx.log(`${name} decode b${b}: ${ab.perOp.toFixed(1)} tok/s with ${note}`);
  };
  {
    const c = parseConfig(json);
    const files = randomModelFiles(json);
    const t0 = performance.now();
    const engine = await Engine.load(files, { gpu, kvSlots: 1, maxContext: 1024, prefillChunk: 512, name });
    const loadS = (performance.now() - t0) / 1000;
    out.push({
      id: `gpu.${name}.load`,
      value: loadS,
      unit: "s",
      note: `Engine.load of the 16-bit model from its files in memory (parse, upload, start-up tuning: ${(engine.startupTuning.ms / 1000).toFixed(1)} s of it)`,
    });
    const plan = planMemory(c, { weightBytes: 2, kvSlots: 1, kvContext: 1024, prefillChunk: 512, vocabChunk: 8192 });
    const roofline = (ctx.peak.copy_gbps * 1e9) / plan.weights;
    ctx.log(
      `${name}: ${c.numLayers} layers, ${(plan.weights / GiB).toFixed(2)} GiB of weights, loaded in ${loadS.toFixed(1)} s; ` +
        `batch-1 roofline ${roofline.toFixed(0)} tok/s`,
    );
    try {
      let base = 0;
      let b32 = 0;
      for (const b of [1, 8, 32]) {
        const r = await decodeRun(
          gpu,
          engine.model,
          b,
          16,
          small ? 3 : 16,
          0,
          small ? 1 : 4,
          undefined,
          true,
          small ? 1 : 4,
          b === 1 && engine.model.submitLayers ? (small ? 1 : 4) : 0, // (a CPU device submits once a step)
        );
        if (b === 1) base = r.decode;
        if (b === 32) b32 = r.decode;
        // The floor of the host's share: the step's Dawn calls alone, replayed; and the encode's own cost, back to back.
        const floor =
          b === 1
            ? `; the step's Dawn calls alone ${(await nativeEncodeMs(gpu, engine.model, 1)).toFixed(2)} ms, ` +
              `its encode back to back ${(await hotEncodeMs(gpu, engine.model, 1)).toFixed(2)} ms`
            : "";
        out.push({
          id: `gpu.${name}.decode.b${b}`,
          value: r.decode,
          unit: "tok/s",
          ...(b === 1
            ? { vs: { id: "copy-bandwidth roofline", ratio: r.decode / roofline } }
            : { vs: { id: `gpu.${name}.decode.b1`, ratio: r.decode / base } }),
          note: `${r.dispatches} dispatches a step; ${r.stepMs.toFixed(2)} ms a step, ${r.encodeMs.toFixed(2)} ms of it encoding${floor}`,
        });
        ctx.log(
          `${name} decode b${b}: ${r.decode.toFixed(1)} tok/s, ${r.dispatches} dispatches a step, ` +
            `${r.stepMs.toFixed(2)} ms a step of which ${r.encodeMs.toFixed(2)} ms encoding on the host${floor}`,
        );
        const rp = r.replays!;
        out.push({
          id: `gpu.${name}.decode.b${b}.replay_off`,
          value: rp.off,
          unit: "tok/s",
          vs: { id: `gpu.${name}.decode.b${b}`, ratio: rp.on / rp.off },
          note: `one step at a time, each recorded by the model's code (ModelRunner.replay off); ratio: replayed from its tape (${rp.on.toFixed(1)} tok/s) over this, blocks of 4 steps alternating`,
        });
        ctx.log(
          `${name} decode b${b}: replayed ${rp.on.toFixed(1)} tok/s, recorded ${rp.off.toFixed(1)} (${(rp.on / rp.off).toFixed(2)}x)`,
        );
        if (r.parts) {
          const p = r.parts;
          out.push({
            id: `gpu.${name}.decode.b${b}.replay_parts_held`,
            value: p.held,
            unit: "tok/s",
            vs: { id: `gpu.${name}.decode.b${b}`, ratio: p.on / p.held },
            note: `one step at a time, replayed and submitted once (ModelRunner.holdParts); ratio: replayed and submitted part-way where the tape says, every ${engine.model.submitLayers} layers (${p.on.toFixed(1)} tok/s), over this, blocks of 4 steps alternating`,
          });
          ctx.log(
            `${name} decode b${b}: replayed with part-way submits ${p.on.toFixed(1)} tok/s, submitted once ${p.held.toFixed(1)} (${(p.on / p.held).toFixed(2)}x)`,
          );
        }
        const a = r.ahead!;
        out.push({
          ...aheadResult(`gpu.${name}.decode.b${b}`, a),
          ...(b === 1 ? { vs: { id: "copy-bandwidth roofline", ratio: a.run / roofline } } : {}),
        });
        ctx.log(
          `${name} decode b${b} in runs of ${AHEAD}: ${a.run.toFixed(1)} tok/s, one step at a time ${a.single.toFixed(1)} ` +
            `(${(a.run / a.single).toFixed(2)}x)`,
        );
      }
      // Where tuning weighed RoPE in the q|k|v matvec against ropeQkv after it: the two in whole decode steps at batch
      // 1, alternating (the choice flipped in the model's tuning for the run; the plan holds either on a GPU).
      const rope = engine.model.tuning.rope;
      if (rope?.inMatvec !== undefined) {
        const tuned = rope.inMatvec;
        const ab = (await decodeRun(gpu, engine.model, 1, 16, 0, small ? 3 : 16, 0, (on) => (rope.inMatvec = on))).ab!;
        rope.inMatvec = tuned;
        const note = `RoPE in ropeQkv; ratio: RoPE in the q|k|v matvec (${ab.fused.toFixed(1)} tok/s) over this, steps alternating; start-up tuning chose ${tuned ? "the matvec" : "ropeQkv"}`;
        pushAb(1, "rope_apart", "", ab, note);
      }
      // Part-way submits (Model.submitLayers: the device starts on the first layers while the host records the rest)
      // against one submit a step, steps alternating: every k layers at batch 1, the default k at batch 8.
      {
        const model = engine.model;
        const k0 = model.submitLayers;
        for (const [b, k] of [
          [1, 1],
          [1, 2],
          [1, 4],
          [1, 8],
          [8, k0 || 4],
        ]) {
          const toggle = (on: boolean) => (model.submitLayers = on ? k : 0);
          const ab = (await decodeRun(gpu, model, b, 16, 0, small ? 3 : 16, 0, toggle)).ab!;
          model.submitLayers = k0;
          const note = `one submit a step; ratio: submitting after the first layer and every ${k} (${ab.fused.toFixed(1)} tok/s) over this, steps alternating; the model's default: ${k0 || "one submit"}`;
          pushAb(b, `submit_every_${k}`, "", ab, note);
        }
      }
      // Rollouts decode with the adapter being trained: batch 1, 8 and 32 with a rank-8 LoRA on every projection
      // (random B, so its terms count), against the same steps without it, as the engine runs it (merged or not:
      // EngineOptions.mergeLora's default); then merged into an f32 copy of the weights (Model.mergeLora: steps of up
      // to decodeRows rows) against its terms apart. Alternating.
      {
        const model = engine.model;
        const [before, merge] = [model.lora, model.mergeLora];
        const lora = new LoraState(gpu, c, DEFAULT_LORA);
        lora.write(new Rng(4).f32(lora.size, -0.05, 0.05));
        // The merge (once an adapter version) runs here, not in the first timed step.
        model.lora = lora;
        model.mergeLora = true;
        await decodeRun(gpu, model, 1, 4, 1);
        model.mergeLora = merge;
        const steps = small ? 3 : 16;
        for (const b of [1, 8, 32]) {
          const toggle = (on: boolean) => (model.lora = on ? lora : undefined);
          const ab = (await decodeRun(gpu, model, b, 16, 0, steps, 0, toggle)).ab!;
          const how = model.runsMergedAt(b) ? "merged" : "its terms apart";
          const note = `with a LoRA adapter (rank 8 on q, k, v, o, gate, up, down; ${how}), as rollouts decode; ratio: over the same steps without it (${ab.perOp.toFixed(1)} tok/s), alternating`;
          out.push({
            id: `gpu.${name}.decode.b${b}.lora`,
            value: ab.fused,
            unit: "tok/s",
            vs: { id: `gpu.${name}.decode.b${b}`, ratio: ab.fused / ab.perOp },
            note,
          });
          ctx.log(`${name} decode b${b}: ${ab.fused.toFixed(1)} tok/s ${note}`);
          model.lora = lora;
          model.mergeLora = true;
          if (model.runsMergedAt(b)) {
            const apart = (await decodeRun(gpu, model, b, 16, 0, steps, 0, (on) => (model.mergeLora = on))).ab!;
            const note = `the adapter's terms apart (mergeLora off); ratio: merged into an f32 copy of the weights (${apart.fused.toFixed(1)} tok/s, ${(model.mergedBytes / GiB).toFixed(2)} GiB) over this, alternating; the engine's default here: ${merge ? "merged" : "apart"}`;
            pushAb(b, "lora_apart", ".lora_merged", apart, note);
          }
          model.mergeLora = merge;
          model.lora = before;
        }
        model.releaseMerged();
        lora.dispose();
      }
      // Start-up tuning's bound on the rows a decode step runs as matvecs; past it, matmuls (tensor cores where on).
      const rows = engine.model.decodeRows;
      ctx.log(`${name}: steps of up to ${rows} rows run their projections as matvecs (start-up tuning)`);
      if (rows < 32) {
        engine.model.decodeRows = DECODE_ROWS_MAX;
        const r = await decodeRun(gpu, engine.model, 32, 16, small ? 3 : 16, 0, 0);
        engine.model.decodeRows = rows;
        out.push({
          id: `gpu.${name}.decode.b32.matvec`,
          value: r.decode,
          unit: "tok/s",
          vs: { id: `gpu.${name}.decode.b32`, ratio: b32 / r.decode },
          note: `batch 32 with every projection a matvec (decodeRows ${DECODE_ROWS_MAX}); ratio: tuning's choice (matmuls past ${rows} rows) over this`,
        });
        ctx.log(`${name} decode b32 as matvecs: ${r.decode.toFixed(1)} tok/s (tuned: ${b32.toFixed(1)})`);
      }
      // The columns matvec (W read once for up to 32 rows of x) against the variants tuned at one row (4-8 rows a
      // pass), in decode steps of 8 and 32 rows run as matvecs (decodeRows lifted for the run), alternating.
      {
        const model = engine.model;
        const mv = (model.tuning.matvec ??= {});
        const [tunedAbove, tunedRows] = [mv.columnsAbove, model.decodeRows];
        const chose = tunedAbove === undefined ? "never" : `past ${tunedAbove} rows`;
        model.decodeRows = DECODE_ROWS_MAX;
        for (const b of [8, 32]) {
          const toggle = (on: boolean) => (mv.columnsAbove = on ? 4 : undefined);
          const ab = (await decodeRun(gpu, model, b, 16, 0, small ? 3 : 16, 0, toggle)).ab!;
          const note = `every projection a matvec of the variants tuned at one row; ratio: the columns variant (${ab.fused.toFixed(1)} tok/s) over this, steps alternating; start-up tuning runs columns ${chose}, matvecs up to ${tunedRows} rows`;
          pushAb(b, "columns_off", ".columns", ab, note);
        }
        mv.columnsAbove = tunedAbove;
        model.decodeRows = tunedRows;
      }
      // Decode attention: the lanes kernel (a token's keys split over a subgroup's lanes, no barriers) against the
      // tiled one with split-KV, in whole decode steps at batch 1 and 32 after prompts of 256 tokens, alternating.
      if (lanesWidth(gpu, c.headDim) !== undefined) {
        const model = engine.model;
        const tuned = model.tuning.attention;
        const chose = attentionVariant(gpu, c.headDim, "decode", tuned);
        const P = small ? 32 : 256;
        for (const b of [1, 32]) {
          const toggle = (on: boolean) =>
            (model.tuning.attention = { ...tuned, decode: { variant: on ? "lanes" : "tiled", profile: "gpu" } });
          const ab = (await decodeRun(gpu, model, b, P, 0, small ? 3 : 16, 0, toggle)).ab!;
          const note = `decode attention as the tiled kernels (split-KV) after prompts of ${P}; ratio: the lanes kernel (${ab.fused.toFixed(1)} tok/s) over this, steps alternating; start-up tuning chose ${chose}`;
          pushAb(b, "attention_tiled", ".attention_lanes", ab, note);
        }
        model.tuning.attention = tuned;
      }
      const model = engine.model;
      // With tensor cores (where the engine turned them on) and without, alternating: their ratio.
      const cores = model.tensorCores;
      const modes = cores ? [true, false] : [false];
      if (cores) {
        const d = await tensorCoreLogprobs(model);
        out.push({
          id: `gpu.${name}.tensor_cores.logprob_diff`,
          value: d,
          unit: "nats",
          note: "largest difference of a top-20 logprob, tensor cores on vs off (4 prompts of 64 random tokens)",
        });
        ctx.log(`${name} tensor cores on vs off: top-20 logprobs differ by at most ${d.toExponential(2)}`);
      }
      const [PB, PT] = small ? [2, 32] : [8, 512];
      const prefill: Record<string, number> = {};
      for (const on of modes) {
        model.tensorCores = on;
        prefill[String(on)] = (await decodeRun(gpu, model, PB, PT, 0)).prefill;
      }
      model.tensorCores = cores;
      out.push({
        id: `gpu.${name}.prefill`,
        value: prefill[String(cores)],
        unit: "tok/s",
        ...(cores ? { vs: { id: "tensor cores off", ratio: prefill.true / prefill.false } } : {}),
        note: `${PB} prompts of ${PT} tokens in one step${cores ? `; ${prefill.false.toFixed(0)} tok/s without tensor cores` : ""}`,
      });
      ctx.log(`${name} prefill: ${JSON.stringify(prefill)} tok/s (by tensor cores on)`);
      engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
      const o = { batch: B, length: T, microBatchTokens: B * T, recompute: false, vocabChunk: 8192 };
      await measureGrpoStep(engine, o); // allocates the optimizer state, compiles
      const grpo: Record<string, { ms: number; peak: number }> = {};
      model.tensorCoresBackward = false; // this figure: tensor cores in the forward only (tensorCoresBackward: below)
      for (const on of modes) {
        model.tensorCores = on;
        if (on !== cores) await measureGrpoStep(engine, o); // compiles the other variant's pipelines
        grpo[String(on)] = await measureGrpoStep(engine, o);
      }
      model.tensorCores = cores;
      const m = grpo[String(cores)];
      out.push({
        id: `gpu.${name}.grpo_${B}x${T}`,
        value: m.ms / 1000,
        unit: "s",
        ...(cores ? { vs: { id: "tensor cores off", ratio: grpo.false.ms / m.ms } } : {}),
        note:
          `${((B * T) / (m.ms / 1000)).toFixed(0)} training tok/s, peak ${(m.peak / GiB).toFixed(2)} GiB, LoRA rank 8 on all targets` +
          (cores ? `; ${(grpo.false.ms / 1000).toFixed(2)} s without tensor cores` : ""),
      });
      ctx.log(
        `${name} GRPO ${B}x${T}: ${(m.ms / 1000).toFixed(2)} s, ${((B * T) / (m.ms / 1000)).toFixed(0)} tok/s, peak ${(m.peak / GiB).toFixed(2)} GiB` +
          (cores ? ` (without tensor cores ${(grpo.false.ms / 1000).toFixed(2)} s)` : ""),
      );
      if (cores) await tensorCoresBackward(ctx, engine, `gpu.${name}.grpo_${B}x${T}`, o, m.ms, out);
      model.tensorCoresBackward = cores; // the engine's default
      await qkvApart(ctx, engine, `gpu.${name}.grpo_${B}x${T}`, o, out);
      await trainingSubmits(ctx, engine, `gpu.${name}.grpo_${B}x${T}`, o, out);
      await attentionFamilies(ctx, engine, `gpu.${name}.grpo_${B}x${T}`, o, [PB, PT], out);
    } finally {
      await engine.close();
      gpu.pool.trim();
    }
  }
}

/**
 * The same shape with q4 projections (EngineOptions.quantize): its weights' bytes, decode at batch 1, 8 and 32 and
 * prefill against the 16-bit model's figures of this run (`out`), the q4 stream matvec against the f16 copy
 * (q4MatvecRows 0) in whole decode steps at batch 1 and 8, alternating, and a LoRA GRPO step.
 */
async function q4Model(
  ctx: BenchContext,
  out: BenchResult[],
  name: string,
  json: Record<string, unknown>,
  small: boolean,
  B: number,
  T: number,
): Promise<void> {
  const gpu = ctx.gpu;
  const at = `gpu.${name}.q4`;
  const files = randomModelFiles(json);
  const t0 = performance.now();
  const engine = await Engine.load(files, {
    gpu,
    kvSlots: 1,
    maxContext: 1024,
    prefillChunk: 512,
    name,
    quantize: "q4",
  });
  const loadS = (performance.now() - t0) / 1000;
  const bf16 = (id: string) => out.find((r) => r.id === id)?.value;
  const vs16 = (id: string, value: number, higher = true) => {
    const v = bf16(id);
    return v ? { vs: { id, ratio: higher ? value / v : v / value } } : {};
  };
  try {
    out.push({
      id: `${at}.load`,
      value: loadS,
      unit: "s",
      ...vs16(`gpu.${name}.load`, loadS, false),
      note: `Engine.load quantizing every matrix on the GPU (q4Quantize; start-up tuning ${(engine.startupTuning.ms / 1000).toFixed(1)} s of it); ratio: the 16-bit load's time over this one`,
    });
    ctx.log(`${name} q4: loaded in ${loadS.toFixed(1)} s`);
    const model = engine.model;
    const wb = engine.plan.weights;
    const wb16 = planMemory(engine.config, {
      weightBytes: 2,
      kvSlots: 1,
      kvContext: 1024,
      prefillChunk: 512,
      vocabChunk: 8192,
    }).weights;
    out.push({
      id: `${at}.weights`,
      value: wb / GiB,
      unit: "GiB",
      vs: { id: "16-bit weights", ratio: wb / wb16 },
      note: `q4 matrices (4.5 bits a weight); ${(wb16 / GiB).toFixed(2)} GiB in 16 bits`,
    });
    ctx.log(`${name} q4: ${(wb / GiB).toFixed(2)} GiB of weights (16-bit: ${(wb16 / GiB).toFixed(2)} GiB)`);
    // Start-up tuning's bound for reading the nibbles in decode (tuneQ4Rows; none on a CPU device), and its timings.
    ctx.log(`${name} q4: decode reads the nibbles up to ${model.q4MatvecRows} rows`);
    for (const [k, v] of gpu.tuning) if (k.startsWith("decode.q4rows@")) ctx.log(`tuning ${k}: ${JSON.stringify(v)}`);
    const steps = small ? 3 : 16;
    for (const b of [1, 8, 32]) {
      const r = await decodeRun(gpu, model, b, 16, steps, 0, small ? 1 : 4);
      const a = r.ahead!;
      out.push({
        id: `${at}.decode.b${b}`,
        value: a.run,
        unit: "tok/s",
        ...vs16(`gpu.${name}.decode.b${b}.ahead`, a.run),
        note: `in runs of ${AHEAD} steps (one step at a time: ${a.single.toFixed(1)} tok/s; ${r.dispatches} dispatches a step); ratio: over the 16-bit model's runs in this suite`,
      });
      ctx.log(
        `${name} q4 decode b${b}: ${a.run.toFixed(1)} tok/s in runs of ${AHEAD}, ${a.single.toFixed(1)} a step at a time`,
      );
    }
    // The device's default (16 on a GPU, 0 on a CPU device), restored after; the A/B runs the q4 matvec up to 16 rows.
    const rows = model.q4MatvecRows;
    for (const b of [1, 8]) {
      const toggle = (on: boolean) => (model.q4MatvecRows = on ? 16 : 0);
      const ab = (await decodeRun(gpu, model, b, 16, 0, steps, 0, toggle)).ab!;
      model.q4MatvecRows = rows;
      out.push({
        id: `${at}.decode.b${b}.f16_copy`,
        value: ab.perOp,
        unit: "tok/s",
        vs: { id: `${at}.decode.b${b}.q4_matvec`, ratio: ab.fused / ab.perOp },
        note: `every projection a matvec over its f16 copy (q4MatvecRows 0); ratio: the q4 stream matvec on the nibbles (${ab.fused.toFixed(1)} tok/s) over this, steps alternating`,
      });
      ctx.log(
        `${name} q4 decode b${b}: q4 matvec ${ab.fused.toFixed(1)} tok/s, over the f16 copy ${ab.perOp.toFixed(1)}`,
      );
    }
    const [PB, PT] = small ? [2, 32] : [8, 512];
    const prefill = (await decodeRun(gpu, model, PB, PT, 0)).prefill;
    out.push({
      id: `${at}.prefill`,
      value: prefill,
      unit: "tok/s",
      ...vs16(`gpu.${name}.prefill`, prefill),
      note: `${PB} prompts of ${PT} tokens in one step (each product over its f16 copy); ratio: over the 16-bit model's`,
    });
    ctx.log(`${name} q4 prefill: ${prefill.toFixed(0)} tok/s`);
    engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
    const o = { batch: B, length: T, microBatchTokens: B * T, recompute: false, vocabChunk: 8192 };
    await measureGrpoStep(engine, o); // allocates the optimizer state, compiles
    const m = await measureGrpoStep(engine, o);
    out.push({
      id: `${at}.grpo_${B}x${T}`,
      value: m.ms / 1000,
      unit: "s",
      ...vs16(`gpu.${name}.grpo_${B}x${T}`, m.ms / 1000, false),
      note: `${((B * T) / (m.ms / 1000)).toFixed(0)} training tok/s, peak ${(m.peak / GiB).toFixed(2)} GiB; ratio: the 16-bit model's step time over this`,
    });
    ctx.log(`${name} q4 GRPO ${B}x${T}: ${(m.ms / 1000).toFixed(2)} s, peak ${(m.peak / GiB).toFixed(2)} GiB`);
  } finally {
    await engine.close();
    gpu.pool.trim();
  }
}

/** GPU time by kernel (timestamps around every dispatch, on a second device) for a decode step at batch 1, a
 *  prefill of 8 x 512 and a GRPO step: where the time goes. Printed, not reported. */
async function profilePart(ctx: BenchContext, name: string): Promise<void> {
  const gpu = await ctx.device({ profile: true });
  if (!gpu.profiling) {
    ctx.log("profile: this device has no timestamp queries");
    return;
  }
  const files = randomModelFiles(configJson(name));
  const engine = await Engine.load(files, { gpu, kvSlots: 1, maxContext: 1024, prefillChunk: 512, name });
  const show = (what: string, steps: number) => {
    const rows = gpu.profileTable();
    const total = rows.reduce((t, r) => t + r.ms, 0);
    ctx.log(`profile ${name} ${what}: ${(total / steps).toFixed(3)} ms of GPU time a step`);
    for (const r of rows.slice(0, 12)) {
      ctx.log(
        `  ${r.name.padEnd(32)} ${(r.ms / steps).toFixed(3).padStart(9)} ms  ${(r.count / steps).toFixed(0).padStart(5)} calls  ${((100 * r.ms) / total).toFixed(1)}%`,
      );
    }
    gpu.profile.clear();
  };
  for (const [k, v] of gpu.tuning) ctx.log(`tuning ${k}: ${JSON.stringify(v)}`);
  for (const n of gpu.notes) ctx.log(`note: ${n}`);
  try {
    await decodeRun(gpu, engine.model, 1, 16, 2);
    gpu.profile.clear();
    await decodeRun(gpu, engine.model, 1, 16, 8);
    show("decode b1 (with its prefill of 16)", 8);
    await decodeRun(gpu, engine.model, 8, 16, 8);
    show("decode b8 (with its prefill of 8 x 16)", 8);
    await decodeRun(gpu, engine.model, 8, 512, 0);
    show("prefill 8 x 512 (with a warm-up step)", 1);
    engine.attachLora({ rank: 8, targets: [...LORA_TARGETS] });
    const o = { batch: 8, length: 512, microBatchTokens: 4096, recompute: false, vocabChunk: 8192 };
    try {
      await measureGrpoStep(engine, o);
      gpu.profile.clear();
      await measureGrpoStep(engine, o);
      show("GRPO 8 x 512", 1);
    } catch (e) {
      ctx.log(`profile GRPO: ${(e as Error).message}`);
    }
  } finally {
    await engine.close();
    gpu.destroy();
  }
}

export const gpuSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const out: BenchResult[] = [];
  const parts = (process.env.WEBART_BENCH_PARTS ?? "overhead,matmul,matvec,models").split(",");
  if (parts.includes("overhead")) await overheadPart(ctx, out);
  if (parts.includes("matmul")) await matmulPart(ctx, out);
  if (parts.includes("matvec")) await matvecPart(ctx, out);
  if (parts.includes("models")) await modelPart(ctx, out);
  if (parts.includes("profile"))
    await profilePart(ctx, process.env.WEBART_BENCH_MODELS?.split(",")[0] ?? "qwen2.5-0.5b");
  return out;
};
export default gpuSuite;
