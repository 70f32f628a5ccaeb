import { beforeAll, expect, it } from "vitest";
import { getDevice, type Gpu, Rng } from "@webart/gpu";
import { assertClose, f64, finiteDiff } from "@webart/gpu/check";
import { GRPO_TOTALS, grpoLoss, grpoSeqStatsBytes, grpoTotalsBytes, packGrpoMeta, type GrpoOptions } from "./index.ts";
import { grpoReference, type GrpoInputs } from "./reference.ts";

let gpu: Gpu;
beforeAll(async () => void (gpu = await getDevice()));

/** N tokens in S sequences (ids shuffled, a few >= S), ~20% unmasked, a few NaN old logprobs. */
function inputs(N: number, S: number, seed: number, spread = 0.6): GrpoInputs {
  const rng = new Rng(seed);
  const lpNew = Float64Array.from({ length: N }, () => -3 * rng.next() - 0.01);
  const lpOld = lpNew.map((x) => (rng.next() < 0.05 ? NaN : x + rng.uniform(-spread, spread)));
  const lpRef = lpNew.map((x) => x + rng.uniform(-0.5, 0.5));
  const seq = Float64Array.from({ length: N }, () => (rng.next() < 0.04 ? S + 2 : rng.int(S)));
  const seqAdv = Float64Array.from({ length: S + 3 }, () => rng.uniform(-1.5, 1.5));
  const advantage = seq.map((s) => seqAdv[s]);
  const weight = seq.map(() => (rng.next() < 0.2 ? 0 : rng.uniform(0.05, 0.3)));
  // The GPU reads f32: round once so both sides see the same inputs.
  const r = (a: Float64Array) => f64(Float32Array.from(a));
  return {
    lpNew: r(lpNew),
    lpOld: r(lpOld),
    lpRef: r(lpRef),
    advantage: r(advantage),
    weight: r(weight),
    seq,
    nseq: S,
  };
}

async function runGpu(inp: GrpoInputs, o: GrpoOptions, withRef: boolean, times = 1) {
  const N = inp.lpNew.length;
  const S = inp.nseq;
  const b = {
    lpNew: gpu.upload(Float32Array.from(inp.lpNew)),
    lpOld: gpu.upload(Float32Array.from(inp.lpOld)),
    lpRef: withRef ? gpu.upload(Float32Array.from(inp.lpRef!)) : null,
    meta: gpu.upload(packGrpoMeta(inp.advantage, inp.weight, inp.seq, inp.klWeight)),
    seqStats: gpu.buffer(grpoSeqStatsBytes(S)),
    dnew: gpu.buffer(N * 4),
    perToken: gpu.buffer(N * 16),
    totals: gpu.buffer(grpoTotalsBytes),
  };
  const rec = gpu.recorder();
  for (let k = 0; k < times; k++) grpoLoss(gpu, rec, b, { N, S }, { ...o, accumulate: k > 0 });
  const reads = [rec.read(b.dnew, N * 4), rec.read(b.perToken, N * 16), rec.read(b.totals, grpoTotalsBytes)];
  await rec.submit();
  const [dnew, perToken, totals] = (await Promise.all(reads)).map((x) => new Float32Array(x));
  gpu.release(...Object.values(b).filter((x): x is GPUBuffer => !!x));
  expect(gpu.errors).toEqual([]);
  const col = (k: number) => Float32Array.from({ length: N }, (_, i) => perToken[4 * i + k]);
  return { dnew, loss: col(0), kl: col(1), clipped: col(2), ratio: col(3), totals };
}

const variants: [string, GrpoOptions][] = [
  ["ppo token", { loss: "ppo", epsilon: 0.2, epsilonHigh: 0.28 }],
  ["ppo sequence (GSPO)", { loss: "ppo", level: "sequence", epsilon: 0.05, epsilonHigh: 0.08 }],
  ["cispo token", { loss: "cispo", epsilon: 0.2, epsilonHigh: 0.3 }],
  ["cispo sequence", { loss: "cispo", level: "sequence", epsilon: 0.05, epsilonHigh: 0.1 }],
];

const cases = variants.flatMap(([name, o]) => [
  [`${name}, no KL`, o, false, false] as const,
  [`${name}, KL beta 0.04`, { ...o, beta: 0.04 }, true, false] as const,
  [`${name}, KL beta 0.5 with its own weights`, { ...o, beta: 0.5 }, true, true] as const,
]);

/** KL weights apart from the loss weights, as an anchored step packs them: none on a third of the trained tokens
 *  (no KL on sampled tokens), and tokens with advantage 0 held by the KL term alone. */
function ownKlWeights(inp: GrpoInputs, seed: number): GrpoInputs {
  const rng = new Rng(seed);
  const advantage = Float64Array.from(inp.advantage);
  const klWeight = Float64Array.from(inp.weight, (w, i) => {
    if (w !== 0 && rng.next() < 0.3) {
      advantage[i] = 0; // held: KL only
      return f64(Float32Array.of(w * rng.uniform(0.5, 2)))[0];
    }
    return rng.next() < 0.33 ? 0 : w;
  });
  return { ...inp, advantage, klWeight };
}

it.each(cases)("GPU matches the reference: %s", async (_, o, withRef, ownKl) => {
  let inp = inputs(203, 7, 11);
  if (!withRef) delete inp.lpRef;
  if (ownKl) inp = ownKlWeights(inp, 3);
  const ref = grpoReference(inp, o);
  const got = await runGpu(inp, o, withRef);
  const tol = { atol: 2e-6, rtol: 1e-5 };
  assertClose("dnew", got.dnew, ref.dnew, tol);
  assertClose("loss", got.loss, ref.loss, tol);
  assertClose("kl", got.kl, ref.kl, tol);
  assertClose("ratio", got.ratio, ref.ratio, tol);
  expect(Array.from(got.clipped)).toEqual(Array.from(ref.clipped));
  assertClose("totals", got.totals, ref.totals, { atol: 1e-5, rtol: 1e-5 });
  // Not vacuous: some masked tokens are clipped and some are not.
  expect(ref.totals[GRPO_TOTALS.clipped]).toBeGreaterThan(0);
  expect(ref.totals[GRPO_TOTALS.clipped]).toBeLessThan(ref.totals[GRPO_TOTALS.masked]);
});

it("accumulate adds micro-batch totals and keeps the clip fraction a ratio", async () => {
  const o: GrpoOptions = { loss: "ppo", epsilon: 0.2, beta: 0.1 };
  const inp = inputs(64, 3, 5);
  const ref = grpoReference(inp, o);
  const got = await runGpu(inp, o, true, 3);
  const expected = ref.totals.map((t, k) => (k === GRPO_TOTALS.clipFraction ? t : 3 * t));
  assertClose("accumulated totals", got.totals, expected, { atol: 1e-5, rtol: 1e-5 });
});

it.each(cases)("dnew of the reference matches central finite differences (f64): %s", (_, o, withRef, ownKl) => {
  let inp = inputs(14, 3, 23, 0.4);
  if (!withRef) delete inp.lpRef;
  if (ownKl) inp = ownKlWeights(inp, 5);
  const stop = f64(inp.lpNew); // stop-gradient inputs stay at the unperturbed point
  const loss = ([x]: Float64Array[]) => grpoReference({ ...inp, lpNew: x }, o, stop).totals[GRPO_TOTALS.loss];
  const [fd] = finiteDiff(loss, [f64(inp.lpNew)]);
  const ref = grpoReference(inp, o);
  assertClose("dnew vs finite differences", ref.dnew, fd, { atol: 1e-7, rtol: 1e-5 });
  expect(Math.max(...fd.map(Math.abs))).toBeGreaterThan(1e-3);
});

it("the KL weights are read apart from the loss weights", async () => {
  // Not vacuous: packing the loss weights as KL weights gives another gradient and loss.
  const o: GrpoOptions = { loss: "ppo", epsilon: 0.2, beta: 0.5 };
  const inp = ownKlWeights(inputs(64, 3, 9), 4);
  const own = await runGpu(inp, o, true);
  const same = await runGpu({ ...inp, klWeight: undefined }, o, true);
  const ref = grpoReference(inp, o);
  assertClose("dnew", own.dnew, ref.dnew, { atol: 2e-6, rtol: 1e-5 });
  const diff = Math.max(...Array.from(own.dnew, (x, i) => Math.abs(x - same.dnew[i])));
  expect(diff).toBeGreaterThan(1e-3);
});
