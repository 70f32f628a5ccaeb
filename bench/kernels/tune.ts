// Start-up tuning as Engine.load runs it, for Qwen2.5-0.5B's shapes (bf16 weights): how long it takes on this
// adapter and what it picked. The rest of the kernels suite then runs those choices ("chosen here").
import { tuneKernels } from "@webart/shaders";
import type { BenchResult, Suite } from "../harness.ts";

const QWEN25_05B = { weights: "bf16" as const, vocab: 151_936, hidden: 896, heads: 14, kvHeads: 2, headDim: 64 };

export const tuneSuite: Suite = async (ctx): Promise<BenchResult[]> => {
  const shape = ctx.quick ? { ...QWEN25_05B, vocab: 4096, hidden: 128, heads: 4 } : QWEN25_05B;
  const t0 = performance.now();
  const tuning = (ctx.tuning = await tuneKernels(ctx.gpu, shape));
  const ms = performance.now() - t0;
  const picked = Object.entries(tuning)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(", ");
  ctx.log(`start-up tuning: ${ms.toFixed(0)} ms; ${picked}`);
  return [{ id: "tune.startup", value: ms, unit: "ms", note: picked }];
};

export default tuneSuite;
