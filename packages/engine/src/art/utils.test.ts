// iterateDataset, limitConcurrency and retry: ART's art.utils loop helpers.
import { describe, expect, it } from "vitest";
import { iterateDataset, limitConcurrency, retry } from "./utils.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("iterateDataset", () => {
  const items = Array.from({ length: 10 }, (_, i) => i);

  it("yields ceil(n / groupsPerStep) batches per epoch, numbered by global and epoch step", () => {
    const all = [...iterateDataset(items, { groupsPerStep: 4, numEpochs: 3, seed: 1 })];
    expect(all.map((b) => [b.step, b.epoch, b.epochStep, b.items.length])).toEqual([
      [0, 0, 0, 4],
      [1, 0, 1, 4],
      [2, 0, 2, 2],
      [3, 1, 0, 4],
      [4, 1, 1, 4],
      [5, 1, 2, 2],
      [6, 2, 0, 4],
      [7, 2, 1, 4],
      [8, 2, 2, 2],
    ]);
    // Each epoch is a permutation of the items, each in its own order.
    const epochs = [0, 1, 2].map((e) => all.filter((b) => b.epoch === e).flatMap((b) => b.items));
    for (const e of epochs) expect([...e].sort((a, b) => a - b)).toEqual(items);
    expect(epochs[0]).not.toEqual(items);
    expect(epochs[1]).not.toEqual(epochs[0]);
  });

  it("is replayable: the same seed gives the same batches, another seed others; initialStep resumes the tail", () => {
    const run = (o: Parameters<typeof iterateDataset>[1]) => [...iterateDataset(items, o)];
    const a = run({ groupsPerStep: 3, numEpochs: 2, seed: 7 });
    expect(run({ groupsPerStep: 3, numEpochs: 2, seed: 7 })).toEqual(a);
    expect(run({ groupsPerStep: 3, numEpochs: 2, seed: 8 }).map((b) => b.items)).not.toEqual(a.map((b) => b.items));
    expect(run({ groupsPerStep: 3, numEpochs: 2, seed: 7, initialStep: 5 })).toEqual(a.slice(5));
    expect(run({ groupsPerStep: 3, numEpochs: 2, seed: 7, initialStep: 99 })).toEqual([]);
    expect(run({ groupsPerStep: 3, shuffle: false }).map((b) => b.items)).toEqual([
      [0, 1, 2],
      [3, 4, 5],
      [6, 7, 8],
      [9],
    ]);
    expect(run({})).toHaveLength(10);
    expect([...iterateDataset([], { numEpochs: 3 })]).toEqual([]);
  });

  it("refuses bad options by name", () => {
    expect(() => [...iterateDataset(items, { groupsPerStep: 0 })]).toThrow(
      "iterateDataset: groupsPerStep: 0 must be an integer >= 1",
    );
    expect(() => [...iterateDataset(items, { numEpochs: 1.5 })]).toThrow(/numEpochs: 1.5/);
    expect(() => [...iterateDataset(items, { batchSize: 2 } as never)]).toThrow('unknown option "batchSize"');
  });
});

describe("limitConcurrency", () => {
  it("runs at most n calls at once, per key, in arrival order", async () => {
    const active = new Map<string, number>();
    const peak = new Map<string, number>();
    const started: number[] = [];
    const rollout = limitConcurrency(
      2,
      async (key: string, i: number) => {
        started.push(i);
        active.set(key, (active.get(key) ?? 0) + 1);
        peak.set(key, Math.max(peak.get(key) ?? 0, active.get(key)!));
        await sleep(5);
        active.set(key, active.get(key)! - 1);
        if (i === 3) throw new Error("boom");
        return i * 10;
      },
      (key) => key,
    );
    const results = await Promise.allSettled([
      ...[0, 1, 2, 3, 4, 5].map((i) => rollout("a", i)),
      ...[6, 7, 8].map((i) => rollout("b", i)),
    ]);
    expect(peak.get("a")).toBe(2);
    expect(peak.get("b")).toBe(2);
    expect(started.filter((i) => i < 6)).toEqual([0, 1, 2, 3, 4, 5]);
    // A failing call frees its slot and its error reaches its caller.
    expect(results[3]).toMatchObject({ status: "rejected", reason: new Error("boom") });
    expect(results[5]).toEqual({ status: "fulfilled", value: 50 });
    expect(() => limitConcurrency(0, async () => 0)).toThrow("limitConcurrency: n: 0 must be an integer >= 1");
  });
});

describe("retry", () => {
  it("retries with exponential backoff up to maxAttempts, then throws the last error", async () => {
    let calls = 0;
    const times: number[] = [];
    const retries: number[] = [];
    const flaky = retry(
      async (x: number) => {
        times.push(Date.now());
        if (++calls < 3) throw new Error(`fail ${calls}`);
        return x * 2;
      },
      { maxAttempts: 3, delayMs: 20, backoffFactor: 3, onRetry: (_e, a) => retries.push(a) },
    );
    expect(await flaky(21)).toBe(42);
    expect(calls).toBe(3);
    expect(retries).toEqual([1, 2]);
    expect(times[1] - times[0]).toBeGreaterThanOrEqual(18);
    expect(times[2] - times[1]).toBeGreaterThanOrEqual(55);
    calls = 0;
    const never = retry(
      async () => {
        calls++;
        throw new Error(`no ${calls}`);
      },
      { maxAttempts: 2, delayMs: 1, onRetry: () => {} },
    );
    await expect(never()).rejects.toThrow("no 2");
    expect(calls).toBe(2);
  });

  it("retries only the errors retryOn accepts", async () => {
    class Transient extends Error {}
    let calls = 0;
    const f = retry(
      async (kind: string) => {
        calls++;
        throw kind === "transient" ? new Transient("t") : new TypeError("bug");
      },
      { maxAttempts: 4, delayMs: 1, retryOn: [Transient], onRetry: () => {} },
    );
    await expect(f("bug")).rejects.toBeInstanceOf(TypeError);
    expect(calls).toBe(1);
    await expect(f("transient")).rejects.toBeInstanceOf(Transient);
    expect(calls).toBe(5);
    const g = retry(
      async () => {
        calls++;
        throw new Error("429");
      },
      { maxAttempts: 3, delayMs: 1, retryOn: (e) => (e as Error).message === "429", onRetry: () => {} },
    );
    calls = 0;
    await expect(g()).rejects.toThrow("429");
    expect(calls).toBe(3);
    expect(() => retry(async () => 0, { attempts: 2 } as never)).toThrow('retry: unknown option "attempts"');
  });
});
