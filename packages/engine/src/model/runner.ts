// The scheduler's view of the model: one batched forward over mixed prefill/decode tokens against the
// KV cache, logits for the sampled rows only, sampling on the GPU, one readback of ids and logprobs.
import { isCpuDevice, type Gpu, type Recorder, type Tape } from "@webart/gpu";
import { packSampleRows, sample, sampleMaskWords, sampleSplit } from "@webart/shaders";
import type { SampleSpec, StepModel } from "../generate/scheduler.ts";
import { KvCache } from "./kv.ts";
import type { Model } from "./model.ts";

/** Decode steps attend over a bound on their keys rounded up to this many, so that a captured step replays for this
 *  many positions in a row (the decode attention's split follows the bound; each row attends to its own length). */
export const REPLAY_KEYS = 64;

export interface StepResult {
  ids: Uint32Array;
  logprobs: Float32Array;
  top?: { tokenId: number; logprob: number }[][];
}

export class ModelRunner implements StepModel {
  readonly kv: KvCache;
  readonly vocabSize: number;
  /** Compute dispatches the last step() recorded (its forward, logits and sampling: one Recorder). */
  lastDispatches = 0;
  /** Host time of the last step() until its submit (encoding its forward, logits and sampling), in ms. */
  lastEncodeMs = 0;
  /**
   * Whether a step whose masks are functions submits its forward before asking for them (default: on a GPU; on a
   * CPU device the device's work runs on the host's own cores, so nothing would overlap).
   */
  overlapMasks: boolean;
  /**
   * Decode steps (one token a sequence, every row sampled) replay a captured step (Tape) while the batch, the bound
   * on their keys (REPLAY_KEYS) and the model's state (Model.recordingState) stay the same: the forward and the
   * logits are recorded by their native calls alone. Off: every step is recorded by the model's code.
   */
  replay = true;
  /**
   * Steps submit once, whatever Model.submitLayers says (Recorder.holdParts): replayed steps too, whose tapes mark
   * where their capture asked to submit part-way. For the bench's A/B; off by default.
   */
  holdParts = false;
  /** Command buffers the last step submitted before its end (Recorder.flushes: part-way submits). */
  lastFlushes = 0;
  /** Decode steps recorded by replaying a tape, and tapes captured (for the bench and tests). */
  readonly tapeStats = { replays: 0, captures: 0 };
  /** The captured decode step: its batch and key bound, the model's state then, and its logits buffer. */
  private tape?: { key: string; state: unknown[]; tape: Tape; logits: GPUBuffer };

  constructor(
    readonly model: Model,
    readonly slots: number,
    readonly maxContext: number,
  ) {
    this.kv = new KvCache(model.gpu, model.config, slots, maxContext);
    this.vocabSize = model.config.vocabSize;
    this.overlapMasks = !isCpuDevice(model.gpu);
  }

  copySlot(src: number, dst: number, len: number): void {
    this.kv.copySlot(src, dst, len);
  }

  /** Bytes the captured decode step holds (0: none). */
  get tapeBytes(): number {
    return this.tape?.tape.bytes ?? 0;
  }

  /** Lets go of the captured decode step and the buffers it holds (before training, or when the runner stops). */
  idle(): void {
    this.tape?.tape.dispose();
    this.tape = undefined;
  }

  /** Frees the KV cache and the captured step: the runner is unusable afterwards. */
  dispose(): void {
    this.idle();
    this.kv.dispose();
  }

  /**
   * A step's replay key (undefined: not a step to replay), for encode. Drops the captured step first when this one
   * will not replay it, before the step's recorder holds releases back: a tape kept is one this step replays.
   */
  private checkTape(tokens: { slots: Uint32Array; pos: Uint32Array }, samples: SampleSpec[]): string | undefined {
    const key = this.tapeKey(tokens, samples);
    const t = this.tape;
    if (t && (key !== t.key || !t.tape.live || !same(t.state, this.model.recordingState()))) this.idle();
    return key;
  }

  /** The replay key of a step (batch and key bound), or undefined where the step is not one to replay. */
  private tapeKey(tokens: { slots: Uint32Array; pos: Uint32Array }, samples: SampleSpec[]): string | undefined {
    const N = tokens.slots.length;
    if (!this.replay || this.model.gpu.profiling || samples.length !== N) return undefined;
    for (let i = 0; i < N; i++) if (samples[i].row !== i) return undefined;
    if (new Set(tokens.slots).size !== N) return undefined;
    return `${N},${keyBound(tokens.pos, this.kv.tmax)}`;
  }

  async step(
    tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
  ): Promise<StepResult> {
    const gpu: Gpu = this.model.gpu;
    const t0 = performance.now();
    const key = this.checkTape(tokens, samples);
    const rec = gpu.recorder();
    rec.holdParts = this.holdParts;
    const copies = this.kv.flush(rec);
    const ids = gpu.upload(tokens.ids);
    let e: ReturnType<typeof this.encode>;
    try {
      e = this.encode(rec, ids, tokens, samples, key);
    } catch (err) {
      // The rest of this step does not run. The slot copies, recorded first, wait for the next step unless a part of
      // the forward went to the device with them (Recorder.submitPart, flushIfPending).
      if (rec.abandon() && rec.flushes === 0) this.kv.requeue(copies);
      throw err;
    } finally {
      gpu.release(ids);
    }
    this.lastDispatches = rec.dispatches + (e?.rec && e.rec !== rec ? e.rec.dispatches : 0);
    this.lastFlushes = rec.flushes;
    this.lastEncodeMs = performance.now() - t0;
    await (e?.rec ?? rec).submit();
    if (e?.forward) await e.forward;
    if (!e) return { ids: new Uint32Array(0), logprobs: new Float32Array(0) };
    const [idsBuf, lpBuf] = await Promise.all([e.ids, e.logprobs]);
    const res: StepResult = { ids: new Uint32Array(idsBuf), logprobs: new Float32Array(lpBuf) };
    if (e.logits) {
      const all = new Float32Array(await e.logits);
      res.top = samples.map((s, i) =>
        s.top > 0 ? topLogprobs(all.subarray(i * this.vocabSize, (i + 1) * this.vocabSize), s.top) : [],
      );
    }
    return res;
  }

  /**
   * The host's time in ms to record one step over these tokens and samples, without running it: the recorder is
   * dropped unsubmitted, with no part-way submits (Recorder.holdParts), so none of its work runs (the step's small
   * uploads still reach the queue; nothing reads them). For the bench, which times it back to back to measure the
   * encode's own cost apart from the slower start of a host that waited.
   */
  encodeOnly(tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array }, samples: SampleSpec[]): number {
    const gpu: Gpu = this.model.gpu;
    const key = this.checkTape(tokens, samples);
    const rec = gpu.recorder();
    rec.holdParts = true; // none of it runs
    const ids = gpu.upload(tokens.ids);
    try {
      const t0 = performance.now();
      const e = this.encode(rec, ids, tokens, samples, key);
      const ms = performance.now() - t0;
      for (const p of [e?.ids, e?.logprobs, e?.logits, e?.forward]) p?.catch(() => {}); // they never settle
      if (e?.rec && e.rec !== rec) e.rec.abandon();
      return ms;
    } finally {
      rec.abandon();
      gpu.release(ids);
    }
  }

  /**
   * `steps` decode steps in a row for a batch of sequences that each feed one token and sample every row in order,
   * without masks or top logprobs: step j feeds the ids step j - 1 sampled, which stay on the device (no readback
   * between steps), at positions pos + j, sampling with step s.step + j. Each step is submitted as soon as it is
   * encoded, so the host encodes step j + 1 while the device runs step j; all ids and logprobs are read at the end.
   * Returns one result per step, as step() would have given them one by one.
   */
  async decode(
    tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
    steps: number,
  ): Promise<StepResult[]> {
    const gpu: Gpu = this.model.gpu;
    const N = tokens.ids.length;
    if (samples.length !== N || samples.some((s, i) => s.row !== i || s.mask || s.top > 0)) {
      throw new Error("ModelRunner.decode: every row is sampled in order, without masks or top logprobs");
    }
    if (new Set(tokens.slots).size !== N) throw new Error("ModelRunner.decode: one token per sequence");
    const submits: Promise<void>[] = [];
    const reads: Promise<ArrayBuffer>[][] = [];
    let ids = gpu.upload(tokens.ids);
    try {
      for (let j = 0; j < steps; j++) {
        // While the last step's submit waits behind a new pipeline's checks, its buffers and uniforms are not given
        // back: the next step would take new ones beside them (and the step after, more). Wait for it instead, so a
        // run holds one step's buffers beside its tape, as the memory plan counts.
        if (j && gpu.submitWaiting) await submits[j - 1].catch(() => {}); // (a failure is reported below)
        const t0 = performance.now();
        const pos = tokens.pos.map((p) => p + j);
        const key = this.checkTape({ slots: tokens.slots, pos }, samples);
        const rec = gpu.recorder();
        rec.holdParts = this.holdParts;
        const copies = j === 0 ? this.kv.flush(rec) : [];
        let e: NonNullable<ReturnType<typeof this.encode>>;
        try {
          e = this.encode(
            rec,
            ids,
            { ...tokens, pos },
            j ? samples.map((s) => ({ ...s, step: s.step + j })) : samples,
            key,
            true,
          )!;
        } catch (err) {
          if (rec.abandon() && rec.flushes === 0) this.kv.requeue(copies);
          for (const p of [...submits, ...reads.flat()]) p.catch(() => {}); // the steps submitted run; this fails
          throw err;
        }
        gpu.release(ids);
        ids = e.idsBuf!;
        reads.push([e.ids, e.logprobs]);
        this.lastDispatches = rec.dispatches;
        this.lastFlushes = rec.flushes;
        this.lastEncodeMs = performance.now() - t0;
        // Not awaited: the submit is made now, and the host goes on to encode the next step.
        submits.push(rec.submit());
      }
    } finally {
      gpu.release(ids);
    }
    for (const p of [...submits, ...reads.flat()]) p.catch(() => {}); // awaited below; a failure is reported once
    await Promise.all(submits);
    return Promise.all(
      reads.map(async ([i, l]) => ({ ids: new Uint32Array(await i), logprobs: new Float32Array(await l) })),
    );
  }

  /**
   * Records one step's forward over `ids` (N tokens at their slots and positions), the logits of the sampled rows
   * and the sampling, with reads of the sampled ids and logprobs (and the logits when top logprobs are asked for).
   * `key`: checkTape's for this step (a decode step replays or captures its forward and logits: tapedForward).
   * With `keepIds`, the sampled ids' buffer is returned unreleased (the next step's input). When a sample's mask
   * is a function and overlapMasks is on, `rec` is submitted after the logits (`forward`: that submit) and the masks
   * are asked for while the device runs it; the sampling is recorded in a new recorder, returned as `rec`, for the
   * caller to submit.
   */
  private encode(
    rec: Recorder,
    ids: GPUBuffer,
    tokens: { slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
    key: string | undefined,
    keepIds = false,
  ):
    | {
        ids: Promise<ArrayBuffer>;
        logprobs: Promise<ArrayBuffer>;
        logits?: Promise<ArrayBuffer>;
        idsBuf?: GPUBuffer;
        rec: Recorder;
        forward?: Promise<void>;
      }
    | undefined {
    const gpu: Gpu = this.model.gpu;
    const N = tokens.slots.length;
    const V = this.vocabSize;
    const sp = new Uint32Array(2 * N);
    const seen = new Set<number>();
    let maxLen = 0;
    for (let i = 0; i < N; i++) {
      sp[2 * i] = tokens.slots[i];
      sp[2 * i + 1] = tokens.pos[i];
      seen.add(tokens.slots[i]);
      maxLen = Math.max(maxLen, tokens.pos[i] + 1);
    }
    const decode = seen.size === N; // one token per sequence: the decode kernel with split-KV
    // A decode step's bound on its keys, rounded up so that its recording serves the next steps too (REPLAY_KEYS).
    if (decode) maxLen = keyBound(tokens.pos, this.kv.tmax);
    const slotPos = gpu.upload(sp);
    const S = samples.length;
    const temp: GPUBuffer[] = [slotPos];
    const drop: Tape[] = [];
    try {
      let logits: GPUBuffer;
      if (key !== undefined) logits = this.tapedForward(rec, ids, slotPos, N, maxLen, key, drop);
      else {
        const { x } = this.model.forward(rec, ids, N, { kind: "cache", kv: this.kv, slotPos, decode, maxLen }, false);
        temp.push(x);
        if (!S) return undefined;
        // A decode step samples every row in order: the logits read x itself.
        const all = S === N && samples.every((s, i) => s.row === i);
        const rows = all ? undefined : gpu.upload(Uint32Array.from(samples.map((s) => s.row)));
        if (rows) temp.push(rows);
        logits = gpu.buffer(S * V * 4, "activations", "logits");
        temp.push(logits);
        this.model.logits(rec, x, N, rows, S, logits);
      }
      let forward: Promise<void> | undefined;
      if (this.overlapMasks && samples.some((s) => typeof s.mask === "function")) {
        forward = rec.submit(); // the device runs the forward while the host works out the masks
        forward.catch(() => {}); // awaited by the caller; a failure is reported there
        rec = gpu.recorder();
      }
      let masks: (Uint32Array | null)[];
      try {
        masks = samples.map((s) => (typeof s.mask === "function" ? s.mask() : s.mask));
      } catch (err) {
        if (forward) rec.abandon(); // the sampling's recorder: nothing was recorded in it
        throw err;
      }
      const params = gpu.upload(
        packSampleRows(
          samples.map((s) => ({
            temperature: s.temperature,
            topK: s.topK,
            topP: s.topP,
            seed: s.seed,
            step: s.step,
            stream: s.stream,
          })),
        ),
      );
      temp.push(params);
      let mask: GPUBuffer | undefined;
      if (masks.some((m) => m)) {
        const words = sampleMaskWords(V);
        const m = new Uint32Array(S * words).fill(0xffffffff);
        masks.forEach((mask, i) => mask && m.set(mask.subarray(0, words), i * words));
        mask = gpu.upload(m);
        temp.push(mask);
      }
      const outIds = gpu.buffer(S * 4, "activations", "sampled ids");
      const outLp = gpu.buffer(S * 4, "activations", "sampled logprobs");
      temp.push(outLp);
      if (!keepIds) temp.push(outIds);
      sample(
        gpu,
        rec,
        { logits, rows: params, tokens: outIds, logprobs: outLp, mask },
        { B: S, V },
        {
          tuning: this.model.tuning.sample,
          split: sampleSplit(
            this.model.tuning.sample,
            S,
            samples.every((s) => !(s.topK > 0) && !(s.topP < 1)),
          ),
        },
      );
      return {
        ids: rec.read(outIds, S * 4),
        logprobs: rec.read(outLp, S * 4),
        logits: samples.some((s) => s.top > 0) ? rec.read(logits, S * V * 4) : undefined,
        idsBuf: keepIds ? outIds : undefined,
        rec,
        forward,
      };
    } finally {
      gpu.release(...temp);
      for (const t of drop) t.dispose();
    }
  }

  /**
   * A decode step's forward and logits over N tokens (every row sampled in order), as a replay of the captured step
   * when there is one (checkTape kept it: its key and the model's state match), else recorded and captured. Returns the logits buffer, the tape's
   * (not to be released). A capture that cannot be replayed (it wrote from the host, or the model's state moved
   * while it was recorded, as when the merged weights were made again) goes to `drop`, disposed after the step.
   */
  private tapedForward(
    rec: Recorder,
    ids: GPUBuffer,
    slotPos: GPUBuffer,
    N: number,
    maxLen: number,
    key: string,
    drop: Tape[],
  ): GPUBuffer {
    const gpu = this.model.gpu;
    if (this.tape) {
      rec.replay(this.tape.tape, [ids, slotPos]);
      this.tapeStats.replays++;
      return this.tape.logits;
    }
    const state = this.model.recordingState();
    const inputs = [
      { buffer: gpu.buffer(N * 4, "activations", "tape ids"), bytes: N * 4 },
      { buffer: gpu.buffer(N * 8, "activations", "tape slotPos"), bytes: N * 8 },
    ];
    rec.copy(ids, 0, inputs[0].buffer, 0, N * 4);
    rec.copy(slotPos, 0, inputs[1].buffer, 0, N * 8);
    rec.capture(inputs);
    let tape: Tape | undefined;
    let logits: GPUBuffer;
    try {
      const attend = { kind: "cache" as const, kv: this.kv, slotPos: inputs[1].buffer, decode: true, maxLen };
      const { x } = this.model.forward(rec, inputs[0].buffer, N, attend, false);
      logits = gpu.buffer(N * this.vocabSize * 4, "activations", "logits");
      this.model.logits(rec, x, N, undefined, N, logits);
      gpu.release(x);
    } finally {
      tape = rec.endCapture();
    }
    this.tapeStats.captures++;
    if (tape.live && same(state, this.model.recordingState())) this.tape = { key, state, tape, logits };
    else drop.push(tape);
    return logits;
  }
}

/** A decode step's bound on its keys: the longest sequence's length after it, rounded up to REPLAY_KEYS, at most
 *  the cache's length. */
function keyBound(pos: Uint32Array, tmax: number): number {
  let maxLen = 0;
  for (const p of pos) maxLen = Math.max(maxLen, p + 1);
  return Math.min(tmax, Math.ceil(maxLen / REPLAY_KEYS) * REPLAY_KEYS);
}

/** Whether two lists hold the same objects and values, in order. */
function same(a: unknown[], b: unknown[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** The k most likely tokens of a logits row with their log-softmax values. */
export function topLogprobs(row: Float32Array, k: number): { tokenId: number; logprob: number }[] {
  let max = -Infinity;
  for (const v of row) max = Math.max(max, v);
  let sum = 0;
  for (const v of row) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  const best: { tokenId: number; logprob: number }[] = [];
  for (let i = 0; i < row.length; i++) {
    if (best.length < k || row[i] > best[best.length - 1].logprob + lse) {
      best.push({ tokenId: i, logprob: row[i] - lse });
      best.sort((a, b) => b.logprob - a.logprob);
      if (best.length > k) best.pop();
    }
  }
  return best;
}
