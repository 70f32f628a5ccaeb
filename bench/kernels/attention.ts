// Attention bench: decode (8 sequences x 512 context, H=14, KV=2, D=64) in GB/s of K/V read, the tiled kernel's
// split-KV, the rows kernel and (with subgroups) the lanes kernel against the tiled kernel in one chunk per
// sequence; causal prefill forward at T=256 in GFLOP/s for every kernel family (tiled, rows, and lanes where the
// device has subgroups). Outputs are verified first.
import type { Gpu, Recorder } from "@webart/gpu";
import {
  ATTENTION_VARIANTS,
  attentionDecode,
  attentionForward,
  attentionVariant,
  lanesWidth,
  trainingSlotPos,
  type AttentionVariant,
} from "@webart/shaders";
import { attentionReference } from "@webart/shaders/reference";
import { Rng } from "@webart/gpu";
import { assertClose } from "@webart/gpu/check";
import { timeGpu, type BenchContext, type BenchResult, type Suite } from "../harness.ts";

const [H, KV, D] = [14, 2, 64];
const TOL = { atol: 1e-5, rtol: 1e-4 }; // f32 vs the f64 reference, as in the kernel tests

interface Setup {
  n: number;
  slots: number;
  tmax: number;
  slotPos: Uint32Array;
  bufs: { q: GPUBuffer; slotPos: GPUBuffer; k: GPUBuffer; v: GPUBuffer; o: GPUBuffer; lse: GPUBuffer };
  want: Float64Array;
}

function setup(gpu: Gpu, n: number, slots: number, tmax: number, slotPos: Uint32Array, seed: number): Setup {
  const rng = new Rng(seed);
  const q = rng.f32(n * H * D);
  const [k, v] = [rng.f32(slots * tmax * KV * D), rng.f32(slots * tmax * KV * D)];
  const dims = { n, h: H, kv: KV, d: D, slots, tmax, scale: 1 / Math.sqrt(D) };
  const bufs = {
    q: gpu.upload(q, "bench"),
    slotPos: gpu.upload(slotPos, "bench"),
    k: gpu.upload(k, "bench"),
    v: gpu.upload(v, "bench"),
    o: gpu.buffer(n * H * D * 4, "bench"),
    lse: gpu.buffer(n * H * 4, "bench"),
  };
  return { n, slots, tmax, slotPos, bufs, want: attentionReference(q, slotPos, k, v, dims).o };
}

async function verifyAndTime(gpu: Gpu, s: Setup, name: string, record: (r: Recorder) => void, quick: boolean) {
  const rec = gpu.recorder();
  record(rec);
  const out = rec.read(s.bufs.o, s.n * H * D * 4);
  await rec.submit();
  assertClose(name, new Float32Array(await out), s.want, TOL);
  return timeGpu(gpu, record, { minMs: quick ? 50 : 1000, maxReps: quick ? 5 : 30 });
}

export const attentionSuite: Suite = async (ctx: BenchContext): Promise<BenchResult[]> => {
  const { gpu, quick, peak } = ctx;
  const results: BenchResult[] = [];

  // Decode: one query token per sequence at position len - 1.
  const [B, len] = [8, quick ? 128 : 512];
  const sp = new Uint32Array(2 * B);
  for (let b = 0; b < B; b++) sp.set([b, len - 1], 2 * b);
  const dec = setup(gpu, B, B, len, sp, 1);
  const dims = { n: B, h: H, kv: KV, d: D, slots: B, tmax: len, maxLen: len };
  const bytes = 2 * B * len * KV * D * 4; // K and V, each read once
  const timeDecode = async (variant: AttentionVariant, split?: number) => {
    let used = 0;
    const ms = await verifyAndTime(
      gpu,
      dec,
      `decode ${variant} split=${split ?? "auto"}`,
      (r) => {
        used = attentionDecode(gpu, r, dec.bufs, dims, { variant, ...(split ? { split } : {}) }).split;
      },
      quick,
    );
    return { ms, used };
  };
  // The tiled kernel in one chunk per sequence, with its split-KV, and the rows kernel (a thread per query row).
  const one = await timeDecode("tiled", 1);
  const auto = await timeDecode("tiled");
  const rows = await timeDecode("rows");
  // The lanes kernel (a token's keys split over a subgroup's lanes), where the device has subgroups.
  const lanes = lanesWidth(gpu, D) !== undefined ? await timeDecode("lanes") : undefined;
  const gbps = (ms: number) => bytes / (ms * 1e6);
  const id = `attention.decode.f32.b${B}_t${len}`;
  const chosen = attentionVariant(gpu, D, "decode", ctx.tuning?.attention);
  const row = (suffix: string, ms: number, note: string, vs = true): BenchResult => ({
    id: `${id}.${suffix}`,
    value: gbps(ms),
    unit: "GB/s",
    fraction_of_peak: gbps(ms) / peak.copy_gbps,
    ...(vs ? { vs: { id: `${id}.tiled_split1`, ratio: one.ms / ms } } : {}),
    note,
  });
  results.push(
    row("tiled_split1", one.ms, `${one.ms.toFixed(2)} ms`, false),
    row("tiled", auto.ms, `${auto.ms.toFixed(2)} ms, split=${auto.used}${chosen === "tiled" ? ", chosen here" : ""}`),
    row("rows", rows.ms, `${rows.ms.toFixed(2)} ms${chosen === "rows" ? ", chosen here" : ""}`),
  );
  if (lanes)
    results.push(
      row(
        "lanes",
        lanes.ms,
        `${lanes.ms.toFixed(2)} ms, split=${lanes.used}${chosen === "lanes" ? ", chosen here" : ""}`,
      ),
    );
  Object.values(dec.bufs).forEach((b) => gpu.release(b));

  // Prefill: one causal sequence of T tokens; 2 matmuls (q.k and p.v) of 2 D flops per visible (query, key) pair.
  const T = quick ? 64 : 256;
  const pre = setup(gpu, T, 1, T, trainingSlotPos(1, T), 2);
  const flops = 4 * D * H * ((T * (T + 1)) / 2);
  const pdims = { n: T, h: H, kv: KV, d: D, slots: 1, tmax: T };
  // Every kernel family, same run: "tiled" (workgroup-memory tiles), "rows" (a thread per query row) and, where the
  // device has subgroups, "lanes" (a few lanes a row, K/V tiles in workgroup memory).
  const variants = ATTENTION_VARIANTS.filter((v) => v !== "lanes" || lanesWidth(gpu, D) !== undefined);
  const msOf: Partial<Record<AttentionVariant, number>> = {};
  for (const variant of variants)
    msOf[variant] = await verifyAndTime(
      gpu,
      pre,
      `prefill ${variant}`,
      (r) => void attentionForward(gpu, r, pre.bufs, pdims, { variant }),
      quick,
    );
  for (const variant of variants) {
    const ms = msOf[variant]!;
    const gf = flops / (ms * 1e6);
    results.push({
      id: `attention.prefill.f32.t${T}.${variant}`,
      value: gf,
      unit: "GFLOP/s",
      fraction_of_peak: gf / peak.fma_gflops,
      ...(variant !== "tiled" ? { vs: { id: `attention.prefill.f32.t${T}.tiled`, ratio: msOf.tiled! / ms } } : {}),
      note: `${ms.toFixed(1)} ms${variant === attentionVariant(gpu, D, "train", ctx.tuning?.attention) ? ", chosen here" : ""}`,
    });
  }
  Object.values(pre.bufs).forEach((b) => gpu.release(b));
  return results;
};

export default attentionSuite;
