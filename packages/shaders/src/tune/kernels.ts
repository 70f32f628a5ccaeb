// Start-up tuning: measures, once per device and model shape, every layout choice the engine's kernels make (matmul
// and matvec variants for the model's weight dtype, threads per row of sampling and logprobs, the attention family
// and its tiles, the LoRA, RMSNorm and decode RoPE layouts) on problems shaped like the model's. The results stay with the device
// (Gpu.tuning, keyed by op and shape); tuneKernels returns them as a KernelTuning, which the model passes to each
// kernel it runs. A kernel given no tuning uses a default for the device's kind.
import type { Gpu, Recorder } from "@webart/gpu";
import { defaultMatmulVariant, matmul, tuneMatmul, type MatmulTuning, type WeightDtype } from "../matmul/index.ts";
import { coopConfig } from "../matmul/coop.ts";
import {
  matvec,
  matvecRopeFits,
  tuneMatvec,
  TUNE_BYTES,
  type MatvecShape,
  type MatvecTuning,
} from "../matvec/index.ts";
import { swigluForwardPacked } from "../swiglu/index.ts";
import { q4Dequant, q4DequantBytes } from "../quant/index.ts";
import { q4Bytes } from "../quant/reference.ts";
import { packSampleRows, sample, SAMPLE_SPLITS, type SampleTuning } from "../sample/index.ts";
import { logprobsChunk, logprobsStatsBytes } from "../logprobs/index.ts";
import {
  attentionBackward,
  attentionDecode,
  attentionForward,
  lanesWidth,
  trainingSlotPos,
  type AttentionTuneCandidate,
  type AttentionTuning,
  type AttentionVariant,
} from "../attention/index.ts";
import { LORA_LAYOUTS, loraBackward, loraForward, type LoraTuning } from "../lora/index.ts";
import { RMSNORM_LAYOUTS, rmsnormBackward, rmsnormForward, type RmsnormTuning } from "../rmsnorm/index.ts";
import { DECODE_LAYOUT_ROWS, ROPE_QKV_LAYOUTS, ropeInvFreq, ropeQkv, type RopeTuning } from "../rope/index.ts";
import { ROW_THREADS, type RowTuning } from "../util/row-threads.ts";
import { bucketSize, isCpuDevice } from "@webart/gpu";
import { Rng } from "@webart/gpu";
import { tune, type TuneOptions } from "./index.ts";
import { relMaxDiff } from "../util/diff.ts";

/** Every tuned kernel's choice for one model shape on one device; each op owns the type of its part. */
export interface KernelTuning {
  matmul?: MatmulTuning;
  matvec?: MatvecTuning;
  sample?: SampleTuning;
  logprobs?: RowTuning;
  attention?: AttentionTuning;
  lora?: LoraTuning;
  rmsnorm?: RmsnormTuning;
  rope?: RopeTuning;
  /** Rows up to which inference runs its projections as matvecs (the model's decodeLayer), matmuls above
   *  (tuneDecodeRows; none: DECODE_ROWS_MAX). */
  decodeRows?: number;
  /** q4 models (TuneShape.q4, on a GPU): rows up to which decode's projections read the nibbles themselves rather
   *  than an f16 copy made for the step (tuneQ4Rows; 0: never). */
  q4Rows?: number;
}

/** The most rows a decode step runs as matvecs: the memory planner's bound too. */
export const DECODE_ROWS_MAX = 64;

/** What the measured problems are shaped like: the model's dims. */
export interface TuneShape {
  /** The linear layers' weight dtype. */
  weights: WeightDtype;
  vocab: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** The MLP's width (its decode projections are tuned one by one on fast devices). */
  intermediate?: number;
  /** Per-head q/k norms (Qwen3, Gemma 3): RoPE stays in ropeQkv, never in the q|k|v matvec. */
  qkNorm?: boolean;
  /** Whether the model's forward products run on tensor cores (the coop matmul); default: where the device has
   *  them. Decides what tuneDecodeRows weighs the matvecs against. */
  tensorCores?: boolean;
  /** The model's matrices are q4 (its products' kernels are tuned on `weights` f16, the copy they read). */
  q4?: boolean;
}

/**
 * Problem sizes: small enough for a CPU device (a few seconds of tuning in all on SwiftShader) and big enough to rank the
 * candidates; on a fast device (see calibrate) larger, shaped like real batches, since a GPU's ranking at a few
 * microseconds a call would say little about the sizes it runs.
 */
interface Sizes {
  matmul: number;
  /** Matvec N, K. */
  matvec: [number, number];
  /** Rows sampled at once (a decode batch); rows of one logprobs chunk (a micro-batch's tokens). */
  sampleRows: number;
  logprobRows: number;
  /** Tokens of the training-layout attention, LoRA and RMSNorm problems. */
  tokens: number;
  /** Sequences and context of the decode attention problem. */
  decodeB: number;
  decodeLen: number;
}
const CPU_SIZES: Sizes = {
  // At 128 the wide variant is one workgroup, which once ranked it ahead of regblock by chance (it is slower
  // from 256 up on SwiftShader).
  matmul: 256,
  matvec: [512, 1024],
  sampleRows: 16,
  logprobRows: 64,
  tokens: 64,
  decodeB: 8,
  decodeLen: 128,
};
const FAST_SIZES: Sizes = {
  // 2048: a GPU's prefill and training matmuls are thousands of rows; at 1024 the 128 x 128 blocks of the wide
  // variant fill only 64 workgroups and it lost to tiled, though it is faster at 4096 (bench gpu, H200).
  matmul: 2048,
  matvec: [4096, 1024],
  sampleRows: 64,
  logprobRows: 1024,
  tokens: 1024,
  decodeB: 32,
  decodeLen: 512,
};
const LORA_RANK = 8;
/** Few repetitions: each candidate only has to be ranked, and the slow ones are very slow on CPU devices. Calls
 * shorter than 2 ms are timed several to a submit. */
const QUICK = { warmup: 1, minReps: 2, minMs: 10, maxReps: 8, minSubmitMs: 2 };

/**
 * True where a 128³ f32 matmul (the default variant, warm) takes under 0.5 ms, i.e. > 8 GFLOP/s: past what CPU
 * implementations of WebGPU reach, the first GPU size class.
 */
async function calibrate(gpu: Gpu): Promise<boolean> {
  const saved = gpu.tuning.get(CALIBRATION)?.winner;
  if (saved === "gpu" || saved === "cpu") return saved === "gpu";
  let p = calibrating.get(gpu);
  if (!p) {
    p = timeCalibration(gpu)
      .then((ms) => {
        // Kept with the tuning results (Gpu.tuning): a saved table carries it, and a load from one times nothing.
        gpu.tuning.set(CALIBRATION, { winner: ms < 0.5 ? "gpu" : "cpu", ms: { matmul128: ms } });
        return ms < 0.5;
      })
      .finally(() => calibrating.delete(gpu));
    calibrating.set(gpu, p);
  }
  return p;
}
/** The calibration's key in Gpu.tuning (once per device: a second model loaded in the process does not time it). */
const CALIBRATION = "calibration";
/** Calibrations under way, so concurrent loads time it once. */
const calibrating = new WeakMap<Gpu, Promise<boolean>>();

/** The best of three timings of a warm 128³ f32 matmul (ms, eight to a submit). */
async function timeCalibration(gpu: Gpu): Promise<number> {
  const n = 128;
  const [a, c] = [gpu.upload(new Rng(3).f32(n * n), "tune"), gpu.buffer(n * n * 4, "tune")];
  try {
    let best = Infinity;
    for (let i = 0; i < 4; i++) {
      const rec = gpu.recorder();
      for (let k = 0; k < 8; k++)
        matmul(gpu, rec, { a, b: a, c }, { M: n, N: n, K: n }, { variant: defaultMatmulVariant(gpu) });
      const t0 = performance.now();
      await rec.submit();
      await gpu.sync();
      if (i > 0) best = Math.min(best, (performance.now() - t0) / 8);
    }
    return best;
  } finally {
    gpu.release(a, c);
  }
}

type Run = (rec: Recorder) => void;

/** Buffers of random f32 (or zeros) freed together. */
class Scratch {
  private readonly bufs: GPUBuffer[] = [];
  private readonly rng = new Rng(11);
  constructor(private readonly gpu: Gpu) {}
  f32(n: number, lo = -1, hi = 1): GPUBuffer {
    return this.keep(this.gpu.upload(this.rng.f32(n, lo, hi), "tune"));
  }
  u32(a: Uint32Array): GPUBuffer {
    return this.keep(this.gpu.upload(a, "tune"));
  }
  values(a: Float32Array): GPUBuffer {
    return this.keep(this.gpu.upload(a, "tune"));
  }
  zeros(bytes: number): GPUBuffer {
    return this.keep(this.gpu.buffer(bytes, "tune"));
  }
  private keep(b: GPUBuffer): GPUBuffer {
    this.bufs.push(b);
    return b;
  }
  release(): void {
    this.gpu.release(...this.bufs);
  }
}

async function tuneWith<C extends string>(
  gpu: Gpu,
  key: string,
  candidates: readonly C[],
  setup: (s: Scratch) => (c: C) => Run,
  opts: TuneOptions = {},
): Promise<C> {
  const s = new Scratch(gpu);
  try {
    const run = setup(s);
    return await tune(gpu, key, candidates, (c, rec) => run(c)(rec), { ...QUICK, ...opts });
  } finally {
    s.release();
  }
}

/** Rising thread counts: once one is 3x slower than the best, more threads do not win either (and in browsers on CPU
 * devices the 256-thread pipelines alone are slow to build, as Dawn zero-fills their workgroup memory). */
const ORDERED = { ordered: true };

/** Threads per row of the sampling and logprobs kernels, at the model's vocabulary (logprobs: one 8192 chunk). */
export async function tuneRowThreads(
  gpu: Gpu,
  vocab: number,
  z: Sizes = CPU_SIZES,
): Promise<{ sample: SampleTuning; logprobs: RowTuning }> {
  const V = Math.max(1, vocab);
  const sampleWinner = await tuneWith(
    gpu,
    `sample.threads@V=${V}`,
    ROW_THREADS,
    (s) => {
      const B = z.sampleRows;
      const rows = packSampleRows(Array.from({ length: B }, (_, b) => ({ temperature: 1, seed: 1, step: b })));
      const [logits, r, tokens, lps] = [s.f32(B * V, -6, 6), s.u32(rows), s.zeros(B * 4), s.zeros(B * 4)];
      return (c) => (rec) => sample(gpu, rec, { logits, rows: r, tokens, logprobs: lps }, { B, V }, { wg: Number(c) });
    },
    ORDERED,
  );
  const cols = Math.min(V, 8192);
  const lpWinner = await tuneWith(
    gpu,
    `logprobs.threads@cols=${cols}`,
    ROW_THREADS,
    (s) => {
      const N = z.logprobRows;
      const [logits, targets, stats] = [s.f32(N * cols, -4, 4), s.zeros(N * 4), s.zeros(logprobsStatsBytes(N))];
      return (c) => (rec) =>
        logprobsChunk(gpu, rec, { logits, targets, stats }, { N, v0: 0, cols }, { first: true, wg: Number(c) });
    },
    ORDERED,
  );
  const sampleTuning: SampleTuning = { threads: Number(sampleWinner) };
  if (z === FAST_SIZES) {
    // GPUs: a decode step of one row, one workgroup walking V against the row split over workgroups.
    const wg = Number(sampleWinner);
    const splits = SAMPLE_SPLITS.filter((c) => Number(c) <= Math.min(wg, V));
    const winner = await tuneWith(gpu, `sample.split@V=${V}`, splits, (s) => {
      const rows = packSampleRows([{ temperature: 1, seed: 1, step: 0 }]);
      const [logits, r, tokens, lps] = [s.f32(V, -6, 6), s.u32(rows), s.zeros(4), s.zeros(4)];
      return (c) => (rec) =>
        sample(gpu, rec, { logits, rows: r, tokens, logprobs: lps }, { B: 1, V }, { wg, split: Number(c) });
    });
    sampleTuning.split = Number(winner);
  }
  return { sample: sampleTuning, logprobs: { threads: Number(lpWinner) } };
}

/**
 * The attention family and tile profile, separately for training (forward and backward of one sequence of
 * `z.tokens`) and for decode (`z.decodeB` sequences of up to `z.decodeLen` tokens of context), with the model's heads.
 */
export async function tuneAttention(
  gpu: Gpu,
  dims: { heads: number; kvHeads: number; headDim: number },
  z: Sizes = CPU_SIZES,
): Promise<AttentionTuning> {
  const { heads: h, kvHeads: kv, headDim: d } = dims;
  const shape = `H=${h},KV=${kv},D=${d}`;
  const train = (s: Scratch) => {
    const n = z.tokens;
    const qs = n * h * d;
    const ks = n * kv * d;
    const [q, k, v, o, dout, dq, dk, dv] = [
      s.f32(qs),
      s.f32(ks),
      s.f32(ks),
      s.zeros(qs * 4),
      s.f32(qs),
      s.zeros(qs * 4),
      s.zeros(ks * 4),
      s.zeros(ks * 4),
    ];
    const [slotPos, lse] = [s.u32(trainingSlotPos(1, n)), s.zeros(n * h * 4)];
    return (c: AttentionTuneCandidate) => (rec: Recorder) => {
      const [variant, profile] = splitCandidate(c);
      const fwd = { q, slotPos, k, v, o, lse };
      attentionForward(gpu, rec, fwd, { n, h, kv, d, slots: 1, tmax: n }, { variant, profile });
      const bwd = { q, k, v, o, lse, dout, dq, dk, dv };
      attentionBackward(gpu, rec, bwd, { b: 1, t: n, h, kv, d }, { variant, profile });
    };
  };
  const decode = (s: Scratch) => {
    const [B, T] = [z.decodeB, z.decodeLen];
    const slotPos = new Uint32Array(2 * B);
    for (let b = 0; b < B; b++) [slotPos[2 * b], slotPos[2 * b + 1]] = [b, T - 1 - b];
    const [q, k, v, o, lse] = [
      s.f32(B * h * d),
      s.f32(B * T * kv * d),
      s.f32(B * T * kv * d),
      s.zeros(B * h * d * 4),
      s.zeros(B * h * 4),
    ];
    const sp = s.u32(slotPos);
    const dims = { n: B, h, kv, d, slots: B, tmax: T, maxLen: T };
    return (c: AttentionTuneCandidate) => (rec: Recorder) => {
      const [variant, profile] = splitCandidate(c);
      attentionDecode(gpu, rec, { q, slotPos: sp, k, v, o, lse }, dims, { variant, profile });
    };
  };
  // The rows family against the tiled one at the device kind's profile; the other profile only where tiled wins
  // (in browsers each tiled pipeline takes seconds to build on a CPU device, as Dawn zero-fills workgroup memory).
  // On GPUs with subgroups, the lanes family too, where it gives what the tiled one gives on this device.
  const tiledDefault: AttentionTuneCandidate = isCpuDevice(gpu) ? "tiled-cpu" : "tiled-gpu";
  const out: AttentionTuning = {};
  const lanes = !isCpuDevice(gpu) && (await lanesAgree(gpu, dims));
  for (const [use, setup] of [
    ["train", train],
    ["decode", decode],
  ] as const) {
    const family: AttentionTuneCandidate[] =
      d % 4 === 0 ? ["rows", tiledDefault, ...(lanes ? ["lanes" as const] : [])] : [tiledDefault];
    const key = `attention.${use}@${shape}${lanes ? ",lanes" : ""}`;
    const w = family.length > 1 ? await tuneWith(gpu, key, family, setup) : tiledDefault;
    const tiles =
      w === "rows" || w === "lanes"
        ? tiledDefault
        : await tuneWith(gpu, `attention.${use}.tiles@${shape}`, ["tiled-cpu", "tiled-gpu"] as const, setup);
    out[use] = { variant: splitCandidate(w)[0], profile: tiles === "tiled-cpu" ? "cpu" : "gpu" };
  }
  return out;
}

const splitCandidate = (c: AttentionTuneCandidate): readonly [AttentionVariant, "cpu" | "gpu" | undefined] =>
  c === "rows" || c === "lanes" ? [c, undefined] : ["tiled", c === "tiled-cpu" ? "cpu" : "gpu"];

/** Attention differences allowed between two f32 families: sums of the same terms in another order. */
const ATTENTION_DIFF_TOL = 1e-4;

/**
 * Whether the lanes family runs here and gives what the tiled one gives, each output within ATTENTION_DIFF_TOL of its
 * largest magnitude: o, lse, dq, dk and dv of a small training problem, and o and lse of a decode step of sequences
 * of different lengths, with the model's heads. It relies on a row's lanes being adjacent lanes of one subgroup,
 * which WebGPU does not promise. Where it does not, a note says why.
 */
export async function lanesAgree(
  gpu: Gpu,
  dims: { heads: number; kvHeads: number; headDim: number },
): Promise<boolean> {
  const { heads: h, kvHeads: kv, headDim: d } = dims;
  if (lanesWidth(gpu, d) === undefined) return false;
  const [b, t] = [2, 45];
  const rng = new Rng(5);
  const [nq, nk] = [b * t * h * d, b * t * kv * d];
  const up = (n: number) => gpu.upload(rng.f32(n), "tune");
  const [q, k, v, dout, slotPos] = [up(nq), up(nk), up(nk), up(nq), gpu.upload(trainingSlotPos(b, t), "tune")];
  // Decode: one token each of B sequences at positions 0, 13, ..., in a cache of b x t (k and v above), split-KV.
  const B = 4;
  const sp = new Uint32Array(2 * B).map((_, i) => (i % 2 ? ((i >> 1) * 13) % t : (i >> 1) % b));
  const decodeSlotPos = gpu.upload(sp, "tune");
  const sizes = [nq, b * t * h, nq, nk, nk, B * h * d, B * h];
  const outs = [0, 1].map(() => sizes.map((n) => gpu.buffer(n * 4, "tune")));
  let worst = 0;
  try {
    const rec = gpu.recorder();
    const reads = (["tiled", "lanes"] as const).map((variant, i) => {
      const [o, lse, dq, dk, dv, od, lsed] = outs[i];
      const fd = { n: b * t, h, kv, d, slots: b, tmax: t };
      attentionForward(gpu, rec, { q, slotPos, k, v, o, lse }, fd, { variant, profile: "gpu" });
      const bwd = { q, k, v, o, lse, dout, dq, dk, dv };
      attentionBackward(gpu, rec, bwd, { b, t, h, kv, d }, { variant, profile: "gpu" });
      const dd = { n: B, h, kv, d, slots: b, tmax: t, maxLen: t };
      attentionDecode(gpu, rec, { q, slotPos: decodeSlotPos, k, v, o: od, lse: lsed }, dd, {
        variant,
        profile: "gpu",
        split: 2,
      });
      return outs[i].map((x, j) => rec.read(x, sizes[j] * 4));
    });
    for (const r of reads.flat()) r.catch(() => {}); // a failed submit rejects them too
    await rec.submit();
    const [x, y] = await Promise.all(reads.map((r) => Promise.all(r)));
    for (let j = 0; j < sizes.length; j++)
      worst = Math.max(worst, relMaxDiff(new Float32Array(x[j]), new Float32Array(y[j])));
  } catch {
    worst = Infinity;
  } finally {
    gpu.release(q, k, v, dout, slotPos, decodeSlotPos, ...outs.flat());
  }
  if (worst <= ATTENTION_DIFF_TOL) return true;
  const why = Number.isFinite(worst)
    ? `it differs from tiled by ${worst.toExponential(2)} (relative, max)`
    : "it failed";
  gpu.notes.push(`attention: the lanes family is not used here: ${why}`);
  return false;
}

/** LoRA's layout (register blocking only, or threads sharing sums in workgroup memory): forward and backward. */
export async function tuneLora(gpu: Gpu, hidden: number, z: Sizes = CPU_SIZES): Promise<LoraTuning> {
  const layout = await tuneWith(gpu, `lora.layout@C=${hidden}`, LORA_LAYOUTS, (s) => {
    const d = { N: z.tokens, in: hidden, out: hidden, R: LORA_RANK, scale: 2 };
    const size = LORA_RANK * hidden * 2;
    const [w, g, x, t, y, dy, dx] = [
      s.f32(size),
      s.zeros(size * 4),
      s.f32(z.tokens * hidden),
      s.zeros(z.tokens * LORA_RANK * 4),
      s.zeros(z.tokens * hidden * 4),
      s.f32(z.tokens * hidden),
      s.zeros(z.tokens * hidden * 4),
    ];
    const slot = { buffer: w, a: 0, b: LORA_RANK * hidden };
    const gslot = { buffer: g, a: 0, b: LORA_RANK * hidden };
    return (c) => (rec) => {
      loraForward(gpu, rec, { slot, x, t, y }, d, { layout: c });
      loraBackward(gpu, rec, { slot, grads: gslot, x, t, dy, dx }, d, { layout: c });
    };
  });
  return { layout };
}

/** RMSNorm's row layout: forward and backward (with the weight gradient) over the model's width. */
export async function tuneRmsnorm(gpu: Gpu, hidden: number, z: Sizes = CPU_SIZES): Promise<RmsnormTuning> {
  const layout = await tuneWith(gpu, `rmsnorm.layout@C=${hidden}`, RMSNORM_LAYOUTS, (s) => {
    const [rows, C] = [z.tokens, hidden];
    const [x, w, y, rstd, dy, dx, dw] = [
      s.f32(rows * C),
      s.f32(C),
      s.zeros(rows * C * 4),
      s.zeros(rows * 4),
      s.f32(rows * C),
      s.zeros(rows * C * 4),
      s.zeros(C * 4),
    ];
    return (c) => (rec) => {
      rmsnormForward(gpu, rec, { x, w, y, rstd }, { rows, C, eps: 1e-6 }, { layout: c });
      rmsnormBackward(gpu, rec, { x, w, rstd, dy, dx, dw }, { rows, C }, { layout: c });
    };
  });
  return { layout };
}

/** ropeQkv's layout on a decode step's rows: `z.decodeB` tokens of the model's q, k and v heads (q/k norms on). */
export async function tuneRope(
  gpu: Gpu,
  dims: { heads: number; kvHeads: number; headDim: number; hidden?: number; weights?: WeightDtype; qkNorm?: boolean },
  z: Sizes = CPU_SIZES,
  matvecTuning?: MatvecTuning,
): Promise<RopeTuning> {
  const { heads: h, kvHeads: kv, headDim: d } = dims;
  const key = `rope.layout@H=${h},KV=${kv},D=${d}`;
  const [n, slots, tmax] = [z.decodeB, z.decodeB, 4];
  const ldq = (h + 2 * kv) * d;
  // ropeQkv's buffers for `rows` tokens at (slot, pos) from `at`, in a cache of `slots` x `tmax`.
  const buffers = (s: Scratch, rows: number, slots: number, tmax: number, at: (t: number) => [number, number]) => {
    const sp = new Uint32Array(2 * rows);
    for (let t = 0; t < rows; t++) [sp[2 * t], sp[2 * t + 1]] = at(t);
    const cache = slots * tmax * kv * d;
    return {
      qkv: s.f32(rows * ldq),
      slotPos: s.u32(sp),
      invFreq: s.values(ropeInvFreq(d, 10000)),
      q: s.zeros(rows * h * d * 4),
      kc: s.zeros(cache * 4),
      vc: s.zeros(cache * 4),
    };
  };
  const inputs = (s: Scratch) => buffers(s, n, slots, tmax, (t) => [t, t % tmax]);
  const layout = await tuneWith(gpu, key, ROPE_QKV_LAYOUTS, (s) => {
    const b = { ...inputs(s), norm: { q: s.f32(d), k: s.f32(d), eps: 1e-6 } };
    const dm = { n, h, kv, d, ldq, slots, tmax };
    return (c) => (rec) => void ropeQkv(gpu, rec, b, dm, { layout: c });
  });
  // Prefill and training: `z.tokens` rows of one sequence each (the layouts' order flips with the rows on SwiftShader).
  const T = Math.max(z.tokens, DECODE_LAYOUT_ROWS + 1);
  const prefillLayout = await tuneWith(
    gpu,
    `rope.prefill_layout@H=${h},KV=${kv},D=${d},N=${T}`,
    ROPE_QKV_LAYOUTS,
    (s) => {
      const b = { ...buffers(s, T, 1, T, (t) => [0, t]), norm: { q: s.f32(d), k: s.f32(d), eps: 1e-6 } };
      const dm = { n: T, h, kv, d, ldq, slots: 1, tmax: T };
      return (c) => (rec) => void ropeQkv(gpu, rec, b, dm, { layout: c });
    },
  );
  // RoPE in the q|k|v matvec's epilogue, against the matvec then ropeQkv: a dispatch fewer a layer, a heavier
  // epilogue (on SwiftShader the matvec then ropeQkv was faster). Decode steps of 1 and of decodeB rows.
  const { hidden: C, weights } = dims;
  if (!C || !weights || dims.qkNorm || !matvecRopeFits(gpu)) return { layout, layoutRows: n, prefillLayout };
  const where = await tuneWith(gpu, `rope.in_matvec@H=${h},KV=${kv},D=${d},C=${C},${weights}`, ROPE_PLACES, (s) => {
    const b = inputs(s);
    const x = s.f32(n * C);
    const norm = s.f32(C);
    const w = s.zeros(Math.ceil((ldq * C * (weights === "f32" ? 4 : 2)) / 4) * 4); // the time does not depend on W
    const segments = [h * d, kv * d, kv * d].map((rows, i) => ({ rows, offsetW: [0, h * d, (h + kv) * d][i] * C }));
    const o = { wDtype: weights, segments, eps: 1e-6, tuning: matvecTuning };
    const rope = { heads: h, kvHeads: kv, headDim: d, slots, tmax };
    return (c) => (rec) => {
      for (const M of [1, n]) {
        if (c === "matvec") {
          const rb = { slotPos: b.slotPos, invFreq: b.invFreq, kc: b.kc, vc: b.vc };
          matvec(gpu, rec, { x, w, y: b.q, norm, rope: rb }, { M, N: ldq, K: C }, { ...o, rope });
        } else {
          matvec(gpu, rec, { x, w, y: b.qkv, norm }, { M, N: ldq, K: C }, o);
          ropeQkv(gpu, rec, b, { n: M, h, kv, d, ldq, slots, tmax }, { layout });
        }
      }
    };
  });
  return { layout, layoutRows: n, prefillLayout, inMatvec: where === "matvec" };
}

/** Where decode's RoPE runs: in ropeQkv after the q|k|v matvec, or in that matvec's epilogue. */
const ROPE_PLACES = ["apart", "matvec"] as const;

/** On fast devices, the decode matvecs a model of this shape runs, each tuned on its own: q|k|v, o, gate|up (gated),
 *  down and the LM head (they span 1.6 MB to 270 MB in Qwen2.5-0.5B, and a GPU's best variant differs by size). */
function decodeShapes(s: TuneShape, z: Sizes): MatvecShape[] {
  if (z !== FAST_SIZES || !s.intermediate) return [];
  const [C, F, HD] = [s.hidden, s.intermediate, s.heads * s.headDim];
  return [
    { N: (s.heads + 2 * s.kvHeads) * s.headDim, K: C },
    { N: C, K: HD },
    { N: F, K: C, gated: true },
    { N: C, K: F },
    { N: s.vocab, K: C },
  ];
}

/** The rows at which tuneDecodeRows weighs matvec against matmul, in order: a matvec's time grows with its rows, a
 *  matmul's hardly does until its row block is full, so the first that the matmul wins ends the search. */
const DECODE_ROW_STEPS = [16, 32, DECODE_ROWS_MAX];

/** What tuneDecodeRows found: the rows up to which decode runs matvecs, and past how many rows they are the columns
 *  variant's (MatvecTuning.columnsAbove; none: never). */
export interface DecodeRowsTuning {
  rows: number;
  columnsAbove?: number;
}

/**
 * Rows up to which a decode step should run its projections as matvecs (the weights streamed once per pass of up to
 * 4-8 rows, norm and activation fused) rather than matmuls (tiled; tensor cores where the device has them and
 * `coop`). Weighs one layer's MLP both ways at 16, 32 and 64 rows: norm·gate|up with the gated activation, then down,
 * against RMSNorm, the gate|up matmul, the activation and the down matmul. At 8 rows and below it is always matvec.
 * With `columns` (GPUs), the columns variant (up to 32 rows a pass) is a third candidate from 8 rows on, until it
 * wins once: past the row count before that one, matvecs run it (columnsAbove), and later steps weigh it against
 * the matmul. The MLP's weights are zeros of the model's dtype, the MLP's width cut so that they fit in 64 MiB.
 */
export async function tuneDecodeRows(
  gpu: Gpu,
  shape: TuneShape,
  tuning: { matmul?: MatmulTuning; matvec?: MatvecTuning },
  coop: boolean,
  columns = false,
): Promise<DecodeRowsTuning> {
  const { hidden: C, weights } = shape;
  if (!shape.intermediate) return { rows: DECODE_ROWS_MAX };
  const wBytes = weights === "f32" ? 4 : 2;
  const F = decodeRowsWidth(shape);
  let columnsAbove: number | undefined;
  const steps = columns ? [8, ...DECODE_ROW_STEPS] : DECODE_ROW_STEPS;
  for (const [i, M] of steps.entries()) {
    // The matvec as the model would run it (columns once that has won), the columns variant while it has not, and
    // the matmul past 8 rows.
    const candidates = [
      "matvec" as const,
      ...(columns && columnsAbove === undefined ? ["columns" as const] : []),
      ...(M > 8 ? ["matmul" as const] : []),
    ];
    const winner = await tuneWith(
      gpu,
      `decode.rows@M=${M},C=${C},F=${F},${weights}${coop ? ",coop" : ""}${columns ? ",columns" : ""}`,
      candidates,
      (s) => {
        const [wgu, wd] = [s.zeros(2 * F * C * wBytes), s.zeros(C * F * wBytes)];
        const [x, nw, a, y] = [s.f32(M * C), s.f32(C, 0.5, 1.5), s.zeros(M * F * 4), s.zeros(M * C * 4)];
        const [h, rstd, gu] = [s.zeros(M * C * 4), s.zeros(M * 4), s.zeros(M * 2 * F * 4)];
        const segments = [
          { rows: F, offsetW: 0 },
          { rows: F, offsetW: F * C },
        ];
        const mm = {
          mode: "nt" as const,
          bDtype: weights,
          tuning: tuning.matmul,
          variant: coop ? ("coop" as const) : undefined,
        };
        return (c) => (rec) => {
          if (c === "matmul") {
            rmsnormForward(gpu, rec, { x, w: nw, y: h, rstd }, { rows: M, C, eps: 1e-6 });
            matmul(gpu, rec, { a: h, b: wgu, c: gu }, { M, N: 2 * F, K: C }, mm);
            swigluForwardPacked(gpu, rec, { gu, h: a }, { N: M, F });
            matmul(gpu, rec, { a, b: wd, c: y }, { M, N: C, K: F }, mm);
            return;
          }
          const mv = {
            wDtype: weights,
            tuning: { ...tuning.matvec, columnsAbove },
            variant: c === "columns" ? ("columns" as const) : undefined,
          };
          const gated = { ...mv, eps: 1e-6, segments, gated: "silu" as const };
          matvec(gpu, rec, { x, w: wgu, y: a, norm: nw }, { M, N: F, K: C }, gated);
          matvec(gpu, rec, { x: a, w: wd, y }, { M, N: C, K: F }, mv);
        };
      },
    );
    if (winner === "columns") columnsAbove = i > 0 ? steps[i - 1] : 4;
    if (winner === "matmul") return { rows: M / 2, columnsAbove };
  }
  return { rows: DECODE_ROWS_MAX, columnsAbove };
}

/** tuneQ4Rows' row counts, tried in order up to the model's decodeRows until the f16 copy wins once. */
const Q4_ROW_STEPS = [1, 8, 16, 32, DECODE_ROWS_MAX];

/**
 * Rows up to which a q4 model's decode steps run their projections on the nibbles themselves (the stream matvec:
 * 4.5 bits a weight read once per pass of 4 rows, dequantized in registers) rather than on an f16 copy made for the
 * step (q4_dequant, then the f16 matvec: the nibbles read once, 2 bytes a weight written and read per pass). Weighs
 * one layer's MLP both ways (norm·gate|up with the gated activation, then down) at 1, 8, 16, 32 and 64 rows, up to
 * `maxRows` (decode's matvec bound), until the copy wins: the rows before that one (0 when it wins at 1 row). The
 * weights are zeros, the MLP's width cut so that the nibbles and the copies fit in 64 MiB (q4Width).
 */
export async function tuneQ4Rows(
  gpu: Gpu,
  shape: TuneShape,
  tuning: { matvec?: MatvecTuning },
  maxRows: number = DECODE_ROWS_MAX,
): Promise<number> {
  const C = shape.hidden;
  const F = q4Width(shape);
  if (!F || C % 32) return 0;
  let rows = 0;
  for (const M of Q4_ROW_STEPS.filter((m) => m <= maxRows)) {
    const winner = await tuneWith(gpu, `decode.q4rows@M=${M},C=${C},F=${F}`, ["nibbles", "copy"] as const, (s) => {
      const [gu, d] = [q4Bytes(2 * F * C), q4Bytes(F * C)];
      const [wgu, sgu, wd, sd] = [s.zeros(gu.nibbles), s.zeros(gu.scales), s.zeros(d.nibbles), s.zeros(d.scales)];
      const [cgu, cd] = [s.zeros(q4DequantBytes(2 * F * C)), s.zeros(q4DequantBytes(F * C))];
      const [x, nw, a, y] = [s.f32(M * C), s.f32(C, 0.5, 1.5), s.zeros(M * F * 4), s.zeros(M * C * 4)];
      const segments = [
        { rows: F, offsetW: 0 },
        { rows: F, offsetW: F * C },
      ];
      const gated = { eps: 1e-6, segments, gated: "silu" as const };
      return (c) => (rec) => {
        if (c === "nibbles") {
          const mv = { wDtype: "q4" as const, tuning: tuning.matvec };
          matvec(gpu, rec, { x, w: wgu, scales: sgu, y: a, norm: nw }, { M, N: F, K: C }, { ...mv, ...gated });
          matvec(gpu, rec, { x: a, w: wd, scales: sd, y }, { M, N: C, K: F }, mv);
          return;
        }
        // As model.ts `dense` runs a q4 product past q4MatvecRows: the span it reads dequantized just before it.
        const mv = { wDtype: "f16" as const, tuning: tuning.matvec };
        q4Dequant(gpu, rec, { q: wgu, s: sgu, out: cgu }, { n: 2 * F * C });
        matvec(gpu, rec, { x, w: cgu, y: a, norm: nw }, { M, N: F, K: C }, { ...mv, ...gated });
        q4Dequant(gpu, rec, { q: wd, s: sd, out: cd }, { n: F * C });
        matvec(gpu, rec, { x: a, w: cd, y }, { M, N: C, K: F }, mv);
      };
    });
    if (winner === "copy") break;
    rows = M;
  }
  return rows;
}

/** The MLP width of tuneQ4Rows' problem: the model's, cut so that the nibbles (0.5625 bytes a weight with the
 *  scales) and the f16 copies (2 bytes a weight) of its three matrices fit in 64 MiB; a multiple of 32 (whole groups
 *  along down's rows). 0: the model has no MLP width. */
function q4Width(shape: TuneShape): number {
  const F = shape.intermediate ?? 0;
  if (!F) return 0;
  return Math.max(32, Math.floor(Math.min(F, TUNE_BYTES / (3 * shape.hidden * 2.6)) / 32) * 32);
}

/**
 * The most bytes tuneKernels holds on the device at once for a model of this shape (the memory plan's tuning line):
 * the largest problem's buffers, each rounded as the pool rounds it, and 256 KiB for uniforms and readbacks. It mirrors
 * the problems above buffer by buffer (memory.test's loads check it against the measured peak).
 */
export async function tuneScratchBytes(gpu: Gpu, shape: TuneShape): Promise<number> {
  const z = (await calibrate(gpu)) ? FAST_SIZES : CPU_SIZES;
  const fast = z === FAST_SIZES;
  const sum = (...bytes: number[]) => bytes.reduce((t, b) => t + bucketSize(b), 0);
  const { vocab: V, hidden: C, heads: h, kvHeads: kv, headDim: d } = shape;
  const wb = shape.weights === "f32" ? 4 : 2;
  const S = z.matmul;
  const [mvN, mvK] = z.matvec;
  const mvBytes = matvecDtypes(gpu, shape.weights).map((t) => (t === "f32" ? 4 : 2));
  const problems = [
    sum(128 * 128 * 4, 128 * 128 * 4), // calibration
    sum(S * S * 4, S * S * 4, S * S * 4), // matmul: A, C, and B (f32 at worst)
    ...mvBytes.map((b) => sum(mvK * 4, mvN * 4, mvN * mvK * b)), // the matvec problem, each dtype tuneAll gives it
    ...decodeShapes(shape, z).flatMap(({ N, K, gated }) =>
      mvBytes.map((b) => {
        const n = Math.max(1, Math.min(N, Math.floor(TUNE_BYTES / ((gated ? 2 : 1) * K * b))));
        return sum(Math.ceil(((gated ? 2 : 1) * n * K * b) / 4) * 4, K * 4, n * 4);
      }),
    ),
    sum(z.sampleRows * V * 4, z.sampleRows * 24, z.sampleRows * 4, z.sampleRows * 4),
    sum(V * 4, 24, 4, 4), // the split sampler (GPUs)
    sum(z.logprobRows * Math.min(V, 8192) * 4, z.logprobRows * 4, logprobsStatsBytes(z.logprobRows)),
  ];
  if (shape.intermediate) {
    const F = decodeRowsWidth(shape);
    const M = DECODE_ROWS_MAX;
    problems.push(
      sum(2 * F * C * wb, C * F * wb, M * C * 4, C * 4, M * F * 4, M * C * 4, M * C * 4, M * 4, M * 2 * F * 4),
    );
  }
  const F4 = q4Width(shape);
  if (shape.q4 && !isCpuDevice(gpu) && F4 && C % 32 === 0) {
    const M = DECODE_ROWS_MAX;
    const [gu, d] = [q4Bytes(2 * F4 * C), q4Bytes(F4 * C)];
    problems.push(
      sum(
        gu.nibbles,
        gu.scales,
        d.nibbles,
        d.scales,
        q4DequantBytes(2 * F4 * C),
        q4DequantBytes(F4 * C),
        M * C * 4,
        C * 4,
        M * F4 * 4,
        M * C * 4,
      ),
    );
  }
  const n = z.tokens;
  const [qs, ks] = [n * h * d * 4, n * kv * d * 4];
  problems.push(sum(qs, ks, ks, qs, qs, qs, ks, ks, n * 8, n * h * 4)); // attention, training
  const [B, T] = [z.decodeB, z.decodeLen];
  problems.push(sum(B * h * d * 4, B * T * kv * d * 4, B * T * kv * d * 4, B * h * d * 4, B * h * 4, B * 8));
  if (fast) {
    // lanesAgree: 2 sequences of 45, a decode step of 4, both families' outputs and their readbacks.
    const [nq, nk] = [90 * h * d * 4, 90 * kv * d * 4];
    const outs = [nq, 90 * h * 4, nq, nk, nk, 4 * h * d * 4, 4 * h * 4];
    problems.push(sum(nq, nk, nk, nq, 90 * 8, 4 * 8, ...outs, ...outs, ...outs, ...outs));
  }
  const R = LORA_RANK;
  problems.push(sum(R * C * 8, R * C * 8, n * C * 4, n * R * 4, n * C * 4, n * C * 4, n * C * 4));
  problems.push(sum(n * C * 4, C * 4, n * C * 4, n * 4, n * C * 4, n * C * 4, C * 4)); // RMSNorm
  const ldq = (h + 2 * kv) * d;
  const rope = (rows: number, slots: number, tmax: number) => [
    rows * ldq * 4,
    rows * 8,
    (d / 2) * 4,
    rows * h * d * 4,
    slots * tmax * kv * d * 4,
    slots * tmax * kv * d * 4,
  ];
  problems.push(sum(...rope(B, B, 4), d * 4, d * 4));
  const Tp = Math.max(n, DECODE_LAYOUT_ROWS + 1);
  problems.push(sum(...rope(Tp, 1, Tp), d * 4, d * 4));
  problems.push(sum(...rope(B, B, 4), B * C * 4, C * 4, Math.ceil((ldq * C * wb) / 4) * 4));
  return Math.max(...problems) + 256 * 1024;
}

/** The weight dtypes of the decode matvec's problems. On a GPU a 16-bit model's decode steps run on f32 weights too,
 *  with an adapter merged in (the engine's defaultMergeLora); on a CPU device they do not unless asked, and then run
 *  untuned. */
function matvecDtypes(gpu: Gpu, weights: WeightDtype): WeightDtype[] {
  return weights === "f32" || isCpuDevice(gpu) ? [weights] : [weights, "f32"];
}

/** The MLP width of tuneDecodeRows' problem: the model's, cut so that its weights fit in 64 MiB (a multiple of 8, so
 *  the stream matvec's rows stay on 16 bytes). */
function decodeRowsWidth(shape: TuneShape): number {
  const wBytes = shape.weights === "f32" ? 4 : 2;
  const F = shape.intermediate ?? 0;
  return Math.max(8, Math.floor(Math.min(F, TUNE_BYTES / (3 * shape.hidden * wBytes)) / 8) * 8);
}

/**
 * Tunes everything a model of this shape runs: linear layers (nt) and their input gradients (nn) against its
 * weights, activation products (nn, f32), the decode matvec, the row kernels, attention, LoRA, RMSNorm and RoPE.
 * Each problem is measured once per device and shape (a second model of the same shape, or a loaded table, reuses
 * the results); models of other shapes on the device measure their own. Its buffers ("tune") go back to the device
 * as each problem ends: at most tuneScratchBytes are on it at once.
 */
export async function tuneKernels(gpu: Gpu, shape: TuneShape): Promise<KernelTuning> {
  const { weights } = shape;
  const z = (await calibrate(gpu)) ? FAST_SIZES : CPU_SIZES;
  const cases = [
    { mode: "nt" as const, bDtype: weights },
    { mode: "nn" as const, bDtype: weights },
    ...(weights === "f32" ? [] : [{ mode: "nn" as const, bDtype: "f32" as const }]),
  ];
  const mm = await tuneMatmul(gpu, cases, z.matmul, { ...QUICK, minReps: 3 });
  const mv = await tuneMatvec(
    gpu,
    matvecDtypes(gpu, weights),
    z.matvec,
    { ...QUICK, minReps: 3 },
    decodeShapes(shape, z),
  );
  // The columns variant is for GPUs' many-row decode steps; on SwiftShader it ran 5-11x slower than subgroup at 8
  // and 32 rows (`npm run bench -- gpu --quick`, matvec part), so tuning there does not spend time on it.
  const rows = await tuneDecodeRows(
    gpu,
    shape,
    { matmul: mm, matvec: mv },
    (shape.tensorCores ?? true) && coopConfig(gpu) !== undefined,
    !isCpuDevice(gpu),
  );
  if (rows.columnsAbove !== undefined) mv.columnsAbove = rows.columnsAbove;
  // q4's nibbles are read by decode on a GPU only (on SwiftShader the f16 copy ran 3.5-7x faster: model.ts).
  const q4Rows = shape.q4 && !isCpuDevice(gpu) ? await tuneQ4Rows(gpu, shape, { matvec: mv }, rows.rows) : undefined;
  return {
    matmul: mm,
    matvec: mv,
    decodeRows: rows.rows,
    ...(q4Rows === undefined ? {} : { q4Rows }),
    ...(await tuneRowThreads(gpu, shape.vocab, z)),
    attention: await tuneAttention(gpu, shape, z),
    lora: await tuneLora(gpu, shape.hidden, z),
    rmsnorm: await tuneRmsnorm(gpu, shape.hidden, z),
    rope: await tuneRope(gpu, shape, z, mv),
  };
}
