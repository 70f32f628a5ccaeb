// CPU reference for the GRPO per-token loss and dloss/dnew, in f64 (finite differences go through it).
// Stop-gradient inputs (CISPO's ratio, a NaN old logprob's stand-in sg(new)) read `stop`, a frozen
// copy of the new logprobs, so a finite difference that perturbs lpNew alone sees the same function
// the gradient is taken of.
import type { GrpoOptions } from "./index.ts";

export interface GrpoInputs {
  lpNew: ArrayLike<number>; // (N,)
  lpOld: ArrayLike<number>; // (N,) NaN: none
  lpRef?: ArrayLike<number>; // (N,)
  advantage: ArrayLike<number>; // (N,)
  weight: ArrayLike<number>; // (N,)
  /** The KL term's weight per token (N,); default `weight`. */
  klWeight?: ArrayLike<number>;
  seq: ArrayLike<number>; // (N,)
  nseq: number;
}

export interface GrpoOutputs {
  loss: Float64Array; // (N,) weight * policy + beta * klWeight * kl
  dnew: Float64Array; // (N,)
  kl: Float64Array; // (N,)
  clipped: Float64Array; // (N,) 1 when clipped and masked
  ratio: Float64Array; // (N,)
  /** loss, policy, kl (weighted sums), clipped tokens, masked tokens, clip fraction, sum of ratios, 0. */
  totals: number[];
}

const MAX_LOG_RATIO = 20;
const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, x));

export function grpoReference(inp: GrpoInputs, o: GrpoOptions, stop: ArrayLike<number> = inp.lpNew): GrpoOutputs {
  const N = inp.lpNew.length;
  const cispo = o.loss === "cispo";
  const eLow = o.epsilon;
  const eHigh = o.epsilonHigh ?? o.epsilon;
  const beta = o.beta ?? 0;
  const masked = (i: number) => inp.weight[i] !== 0;
  const old = (i: number) => (Number.isNaN(inp.lpOld[i]) ? stop[i] : inp.lpOld[i]);
  const logRatio = (i: number) => (cispo ? stop[i] : inp.lpNew[i]) - old(i);
  const ppoClipped = (r: number, a: number) => (a > 0 && r > 1 + eHigh) || (a < 0 && r < 1 - eLow);

  // Sequence level: mean log-ratio over each sequence's masked tokens, and PPO's d(loss)/d(ratio).
  const seqSum = new Float64Array(inp.nseq);
  const seqCount = new Float64Array(inp.nseq);
  for (let i = 0; i < N; i++)
    if (masked(i) && inp.seq[i] < inp.nseq) {
      seqSum[inp.seq[i]] += logRatio(i);
      seqCount[inp.seq[i]]++;
    }
  const seqMean = seqSum.map((s, k) => s / Math.max(seqCount[k], 1));
  const seqRatio = seqMean.map((m) => Math.exp(clamp(m, -MAX_LOG_RATIO, MAX_LOG_RATIO)));
  const seqDr = new Float64Array(inp.nseq);
  for (let i = 0; i < N; i++) {
    const s = inp.seq[i];
    if (masked(i) && s < inp.nseq && !ppoClipped(seqRatio[s], inp.advantage[i]))
      seqDr[s] -= inp.weight[i] * inp.advantage[i];
  }

  const out: GrpoOutputs = {
    loss: new Float64Array(N),
    dnew: new Float64Array(N),
    kl: new Float64Array(N),
    clipped: new Float64Array(N),
    ratio: new Float64Array(N),
    totals: new Array(8).fill(0),
  };
  for (let i = 0; i < N; i++) {
    const a = inp.advantage[i];
    const w = inp.weight[i];
    const kw = (inp.klWeight ?? inp.weight)[i];
    const s = inp.seq[i];
    const atSeq = o.level === "sequence" && s < inp.nseq;
    const lr = atSeq ? seqMean[s] : logRatio(i);
    const r = Math.exp(clamp(lr, -MAX_LOG_RATIO, MAX_LOG_RATIO));
    const inside = Math.abs(lr) < MAX_LOG_RATIO ? 1 : 0;
    const rc = clamp(r, 1 - eLow, 1 + eHigh);
    let policy: number;
    let grad: number;
    let clipped: boolean;
    if (cispo) {
      policy = -rc * a * inp.lpNew[i];
      grad = -rc * a * w;
      clipped = r !== rc;
    } else {
      clipped = ppoClipped(r, a);
      policy = -(clipped ? rc : r) * a;
      if (atSeq) grad = (seqDr[s] * r * inside) / Math.max(seqCount[s], 1);
      else grad = clipped ? 0 : -a * r * inside * w;
    }
    let kl = 0;
    if (inp.lpRef) {
      const d0 = inp.lpRef[i] - inp.lpNew[i];
      const d = clamp(d0, -MAX_LOG_RATIO, MAX_LOG_RATIO);
      kl = Math.exp(d) - d - 1;
      if (Math.abs(d0) < MAX_LOG_RATIO) grad += beta * kw * (1 - Math.exp(d));
    }
    const c = clipped && masked(i) ? 1 : 0;
    out.loss[i] = w * policy + beta * kw * kl;
    out.dnew[i] = masked(i) ? grad : 0;
    out.kl[i] = kl;
    out.clipped[i] = c;
    out.ratio[i] = r;
    const t = out.totals;
    t[0] += out.loss[i];
    t[1] += w * policy;
    t[2] += kw !== 0 ? w * kl : 0; // where the KL term applies
    t[3] += c;
    if (masked(i)) {
      t[4]++;
      t[6] += r;
    }
  }
  out.totals[5] = out.totals[4] > 0 ? out.totals[3] / out.totals[4] : 0;
  return out;
}
