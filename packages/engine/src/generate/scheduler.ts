// Continuous batching: requests join and leave at step boundaries; each engine step feeds every
// decoding sequence's next token plus chunks of waiting prompts, samples on the GPU, and reads back
// only token ids and logprobs. n > 1 samples share the prompt's KV; a new turn of a conversation
// reuses the KV of a finished sequence whose tokens are a prefix of the new prompt.
import type { FinishReason, GenerateRequest, GenerateResult, Generator, TokenConstraint, TokenEvent } from "./types.ts";

/** One row to sample after a step: which token of the batch, and how. */
export interface SampleSpec {
  row: number;
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  step: number;
  stream: number;
  /**
   * Allowed-token bitmask (ceil(V/32) words) or null; or a function that gives it, which the model calls once the
   * step's forward is on the device, so the host works out the masks while the device runs it.
   */
  mask: Uint32Array | null | (() => Uint32Array | null);
  /** Alternatives to report (top logprobs), 0 for none. */
  top: number;
}

/** A free-text sample of row `row` (no mask, no top logprobs, temperature 1, no top-k or top-p) from sequence
 *  stream `stream`, seeded by `seed` (default: the stream): what a decode run samples. For the speed check and benches. */
export function freeSample(row: number, stream: number, step: number, seed = stream): SampleSpec {
  return { row, temperature: 1, topK: 0, topP: 1, seed, step, stream, mask: null, top: 0 };
}

/** What the scheduler needs from the model: one batched forward + sampling, and KV slot copies. */
export interface StepModel {
  readonly slots: number;
  readonly maxContext: number;
  readonly vocabSize: number;
  step(
    tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
  ): Promise<{ ids: Uint32Array; logprobs: Float32Array; top?: { tokenId: number; logprob: number }[][] }>;
  /** Copies KV rows [0, len) of slot `src` into slot `dst` (recorded before the next step). */
  copySlot(src: number, dst: number, len: number): void;
  /**
   * Optional: `steps` decode steps in a row, each row feeding back the token it sampled (step j at pos + j with
   * sample step s.step + j), for rows that are all sampled in order with no masks or top logprobs. One result per
   * step, the same as that many step() calls.
   */
  decode?(
    tokens: { ids: Uint32Array; slots: Uint32Array; pos: Uint32Array },
    samples: SampleSpec[],
    steps: number,
  ): Promise<{ ids: Uint32Array; logprobs: Float32Array }[]>;
  /** Optional: lets go of what the model keeps between steps for speed (a captured decode step's buffers), once no
   *  request runs and before work that needs the device's memory to itself (exclusive). */
  idle?(): void;
}

interface Seq {
  req: Pending;
  sample: number;
  slot: number;
  /** Tokens whose KV is in the slot (positions 0..kvLen-1). */
  kvLen: number;
  /** Tokens to feed next (prompt remainder during prefill, then one sampled token). */
  feed: number[];
  out: number[];
  logprobs: number[];
  constraint?: TokenConstraint;
  /** With a constraint: the set each sampled token was drawn from (SampleResult.allowed), and the mask in flight. */
  allowed?: AllowedSets;
  mask?: Uint32Array | null;
  finish?: FinishReason;
}

/**
 * The sets a constrained sample's tokens were drawn from, each distinct set stored once (a copy: a constraint may
 * reuse the array it returned for another state later).
 */
class AllowedSets {
  readonly perToken: (Uint32Array | null)[] = [];
  private byHash = new Map<number, Uint32Array[]>();

  push(mask: Uint32Array | null | undefined): void {
    if (!mask) {
      this.perToken.push(null);
      return;
    }
    let h = 0x811c9dc5;
    for (let i = 0; i < mask.length; i++) h = Math.imul(h ^ mask[i], 0x01000193);
    const same = this.byHash.get(h) ?? [];
    let m = same.find((x) => x.length === mask.length && x.every((w, i) => w === mask[i]));
    if (!m) {
      m = mask.slice();
      same.push(m);
      this.byHash.set(h, same);
    }
    this.perToken.push(m);
  }
}

interface Pending {
  req: GenerateRequest;
  onToken?: (e: TokenEvent) => boolean | void;
  seqs: Seq[];
  resolve: (r: GenerateResult) => void;
  reject: (e: unknown) => void;
  cached: number;
  /** Prefill of sample 0 is done and the prompt's KV has been copied to the other samples. */
  forked: boolean;
  /** The request's index of this part's sample 0 (a request with more samples than KV slots runs in parts). */
  first: number;
}

export interface SchedulerOptions {
  /** Prompt tokens fed per step across all prefilling sequences. */
  prefillChunk?: number;
  /**
   * Decode steps run in a row, without reading tokens back between them, when every running sequence decodes free
   * text (no constraint, no top logprobs) and no request waits (default 8; 1: a step at a time). A sequence that
   * stops inside the run drops the tokens sampled after its stop.
   */
  decodeAhead?: number;
}

export class Scheduler implements Generator {
  private waiting: Pending[] = [];
  private running: Seq[] = [];
  private free: number[];
  /** Finished slots whose KV can serve a later prompt with the same prefix (most recent last). */
  private cache: { slot: number; tokens: number[] }[] = [];
  private pumping = false;
  private paused?: Promise<void>;
  private readonly prefillChunk: number;
  private readonly decodeAhead: number;
  private closed = false;
  /** A decode run (decodeRuns: runs of more than one step) counts each step whose tokens were kept in steps, and
   *  the steps after every sequence of it stopped in stepsDropped. rounds: the model's calls, a step or a run each
   *  (each waits on one readback). */
  stats = { steps: 0, tokensFed: 0, tokensSampled: 0, cacheHits: 0, decodeRuns: 0, stepsDropped: 0, rounds: 0 };

  constructor(
    private model: StepModel,
    opts: SchedulerOptions = {},
  ) {
    this.free = Array.from({ length: model.slots }, (_, i) => i);
    this.prefillChunk = opts.prefillChunk ?? 256;
    this.decodeAhead = opts.decodeAhead ?? 8;
    if (!(Number.isInteger(this.decodeAhead) && this.decodeAhead >= 1)) {
      throw new Error(`Scheduler: decodeAhead ${this.decodeAhead} must be an integer >= 1`);
    }
  }

  get maxContext(): number {
    return this.model.maxContext;
  }
  get vocabSize(): number {
    return this.model.vocabSize;
  }

  /** Forget cached KV (after the adapter changed). */
  invalidateCache(): void {
    for (const c of this.cache) this.free.push(c.slot);
    this.cache = [];
  }

  /** Runs `f` with no step in flight (e.g. a training step), holding new steps until it ends. */
  async exclusive<T>(f: () => Promise<T>): Promise<T> {
    while (this.paused) await this.paused;
    let release!: () => void;
    this.paused = new Promise((r) => (release = r));
    try {
      while (this.pumping) await new Promise((r) => setTimeout(r, 1));
      this.model.idle?.();
      return await f();
    } finally {
      this.paused = undefined;
      release();
      this.kick();
    }
  }

  /**
   * Runs `f` on `n` KV slots that no sequence holds, inside exclusive, for work of the caller's own on the model (the
   * speed check). Cached prefixes are dropped first: their slots are free to take. Refused, with the counts, when
   * fewer than `n` are free (sequences paused mid-request hold the rest).
   */
  async withSlots<T>(n: number, f: (slots: number[]) => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      this.invalidateCache();
      if (n > this.free.length) {
        throw new Error(
          `the engine has ${this.free.length} of its ${this.model.slots} KV slots free (requests in flight hold the ` +
            `rest), ${n} wanted: try again once they end`,
        );
      }
      const slots = this.free.splice(this.free.length - n, n);
      try {
        return await f(slots);
      } finally {
        this.free.push(...slots);
      }
    });
  }

  /** Fails every waiting and running request, after the step in flight; later requests are refused. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.exclusive(async () => this.failAll(new Error("generate: the engine was closed")));
  }

  generate(req: GenerateRequest, onToken?: (e: TokenEvent) => boolean | void): Promise<GenerateResult> {
    if (this.closed) return Promise.reject(new Error("generate: the engine was closed"));
    if (req.promptIds.length === 0) return Promise.reject(new Error("generate: empty prompt"));
    // A tokenizer may know ids the model has no embedding row for (Gemma 3's image token in the text-only models).
    const V = this.vocabSize;
    const outside = req.promptIds.find((id) => !(Number.isInteger(id) && id >= 0 && id < V));
    if (outside !== undefined)
      return Promise.reject(
        new Error(
          `generate: prompt token id ${outside} is outside the model's vocabulary [0, ${V}); remove that token`,
        ),
      );
    // More samples than KV slots: queue them in parts of at most `slots`, each admitted when its slots are free
    // (later parts find the prompt's KV in the cache). Sample k draws on stream k whichever part it is in.
    const S = this.model.slots;
    const parts: Promise<GenerateResult>[] = [];
    for (let first = 0; first < req.n; first += S) {
      const part = { ...req, n: Math.min(S, req.n - first) };
      parts.push(
        new Promise((resolve, reject) => {
          this.waiting.push({ req: part, onToken, seqs: [], resolve, reject, cached: 0, forked: false, first });
          this.kick();
        }),
      );
    }
    if (parts.length === 1) return parts[0];
    return Promise.all(parts).then((rs) => ({
      samples: rs.flatMap((r) => r.samples),
      promptTokens: req.promptIds.length,
      cachedPromptTokens: rs[0].cachedPromptTokens,
    }));
  }

  private kick(): void {
    if (this.pumping || this.paused || this.closed) return;
    this.pumping = true;
    queueMicrotask(() =>
      this.pump()
        .catch((e) => this.failAll(e))
        .finally(() => {
          this.pumping = false;
          if (!this.paused && (this.waiting.length || this.running.length)) this.kick();
        }),
    );
  }

  private failAll(e: unknown): void {
    const reqs = new Set<Pending>([...this.waiting, ...this.running.map((s) => s.req)]);
    for (const s of this.running) this.free.push(s.slot);
    this.running = [];
    this.waiting = [];
    for (const p of reqs) p.reject(e);
  }

  /** Takes a slot, preferring the cached one with the longest shared prefix with `prompt`. */
  private takeSlot(prompt: number[] | null): { slot: number; reuse: number } | null {
    if (prompt) {
      let best = -1;
      let bestLen = 0;
      this.cache.forEach((c, i) => {
        let k = 0;
        const max = Math.min(c.tokens.length, prompt.length - 1);
        while (k < max && c.tokens[k] === prompt[k]) k++;
        if (k > bestLen) {
          bestLen = k;
          best = i;
        }
      });
      if (best >= 0) {
        const [c] = this.cache.splice(best, 1);
        this.stats.cacheHits++;
        return { slot: c.slot, reuse: bestLen };
      }
    }
    const slot = this.free.pop() ?? this.cache.shift()?.slot;
    return slot === undefined ? null : { slot, reuse: 0 };
  }

  private admit(): void {
    while (this.waiting.length) {
      const p = this.waiting[0];
      const n = p.req.n;
      if (this.free.length + this.cache.length < n) return;
      this.waiting.shift();
      const prompt = p.req.promptIds;
      const seeds = Array.from({ length: n }, (_, i) => i);
      const first = this.takeSlot(prompt)!;
      p.cached = first.reuse;
      for (const i of seeds) {
        const slot = i === 0 ? first : this.takeSlot(null)!;
        p.seqs.push({
          req: p,
          sample: i,
          slot: slot.slot,
          kvLen: i === 0 ? first.reuse : 0,
          // Sample 0 prefills; the others get the prompt's KV copied in, then feed the last prompt token.
          feed: i === 0 ? prompt.slice(first.reuse) : [],
          out: [],
          logprobs: [],
          ...(p.req.constraint ? { constraint: p.req.constraint(), allowed: new AllowedSets() } : {}),
        });
      }
      if (n === 1) p.forked = true;
      this.running.push(...p.seqs);
    }
  }

  private async pump(): Promise<void> {
    while (!this.paused) {
      this.admit();
      if (!this.running.length) {
        this.model.idle?.(); // nothing to decode: what the model kept for the next step goes (between requests)
        return;
      }
      // Fork: once sample 0 has prefilled all but the last prompt token, copy that KV to its siblings.
      for (const s of this.running) {
        const p = s.req;
        if (!p.forked && s.sample === 0 && s.feed.length === 1) {
          const L = p.req.promptIds.length - 1;
          for (const sib of p.seqs.slice(1)) {
            if (L > 0) this.model.copySlot(s.slot, sib.slot, L);
            sib.kvLen = L;
            sib.feed = [p.req.promptIds[L]];
          }
          p.forked = true;
        }
      }
      const ids: number[] = [];
      const slots: number[] = [];
      const pos: number[] = [];
      const samples: SampleSpec[] = [];
      const sampled: Seq[] = [];
      let budget = this.prefillChunk;
      for (const s of this.running) {
        if (!s.feed.length) continue;
        const p = s.req;
        // Prefill: all but the last prompt token may be chunked; the last token is fed alone and sampled.
        const prefill = s.feed.length > 1;
        if (prefill && !(s.sample === 0 || p.forked)) continue;
        const take = prefill ? Math.min(s.feed.length - 1, Math.max(1, budget)) : 1;
        if (prefill && budget <= 0) continue;
        for (let k = 0; k < take; k++) {
          ids.push(s.feed[k]);
          slots.push(s.slot);
          pos.push(s.kvLen + k);
        }
        if (prefill) budget -= take;
        else {
          const sp = p.req.sampling;
          s.mask = null;
          const c = s.constraint;
          samples.push({
            row: ids.length - 1,
            temperature: sp.temperature,
            topK: sp.topK,
            topP: sp.topP,
            seed: sp.seed >>> 0,
            step: s.out.length,
            stream: p.first + s.sample,
            mask: c ? () => (s.mask = c.allowed() ?? null) : null,
            top: p.req.topLogprobs,
          });
          sampled.push(s);
        }
        s.feed = s.feed.slice(take);
        s.kvLen += take;
      }
      if (!ids.length) return;
      const ahead = this.aheadSteps(sampled, ids.length);
      if (ahead > 1) {
        const runs = await this.model.decode!(
          { ids: Uint32Array.from(ids), slots: Uint32Array.from(slots), pos: Uint32Array.from(pos) },
          samples,
          ahead,
        );
        this.stats.decodeRuns++;
        this.stats.rounds++;
        runs.forEach((res, j) => {
          if (sampled.every((s) => s.finish)) this.stats.stepsDropped++;
          else this.stats.steps++;
          for (const [i, s] of sampled.entries()) {
            if (s.finish) continue; // stopped earlier in the run: what it sampled after is dropped
            if (j) {
              s.feed = [];
              s.kvLen++;
              this.stats.tokensFed++;
            }
            this.stats.tokensSampled++;
            this.accept(s, res.ids[i], res.logprobs[i]);
          }
        });
        this.stats.tokensFed += ids.length;
        this.retire();
        continue;
      }
      const res = await this.model.step(
        { ids: Uint32Array.from(ids), slots: Uint32Array.from(slots), pos: Uint32Array.from(pos) },
        samples,
      );
      this.stats.steps++;
      this.stats.rounds++;
      this.stats.tokensFed += ids.length;
      this.stats.tokensSampled += samples.length;
      sampled.forEach((s, i) => this.accept(s, res.ids[i], res.logprobs[i], res.top?.[i]));
      this.retire();
    }
  }

  /**
   * How many decode steps to run in a row now: 1 unless the model can, every fed token is a running sequence's
   * sampled one, free text (no constraint, no top logprobs), and no request waits; at most as many as the
   * sequence nearest its token limit or the context's end has left.
   */
  private aheadSteps(sampled: Seq[], fed: number): number {
    if (this.decodeAhead < 2 || !this.model.decode || this.waiting.length || sampled.length !== fed) return 1;
    let n = this.decodeAhead;
    for (const s of sampled) {
      const r = s.req.req;
      if (s.constraint || r.topLogprobs > 0 || r.signal?.aborted) return 1;
      // s.kvLen already counts the token fed now; a step at position p needs p < maxContext.
      n = Math.min(n, r.maxTokens - s.out.length, this.model.maxContext - s.kvLen + 1);
    }
    return Math.max(1, n);
  }

  private accept(s: Seq, id: number, logprob: number, top?: { tokenId: number; logprob: number }[]): void {
    const r = s.req.req;
    if (id === 0xffffffff) {
      // The constraint allowed nothing: end the sample here.
      s.finish = "stop";
      return;
    }
    s.out.push(id);
    s.logprobs.push(logprob);
    s.allowed?.push(s.mask);
    s.constraint?.accept(id);
    const keep = s.req.onToken?.({ sample: s.req.first + s.sample, tokenId: id, logprob, top }) !== false;
    // A finished constraint allows only the stop tokens, so the sample still ends with one (training
    // needs the model to learn to stop).
    if (r.stopTokenIds.includes(id) || !keep) s.finish = "stop";
    else if (r.signal?.aborted) s.finish = "abort";
    else if (s.out.length >= r.maxTokens || s.kvLen + 1 >= this.model.maxContext) s.finish = "length";
    else s.feed = [id];
  }

  private retire(): void {
    const done = this.running.filter((s) => s.finish);
    if (!done.length) return;
    this.running = this.running.filter((s) => !s.finish);
    for (const s of done) {
      // Its KV holds the prompt and every sampled token but the last.
      const tokens = [...s.req.req.promptIds, ...s.out].slice(0, s.kvLen);
      this.cache.push({ slot: s.slot, tokens });
    }
    const reqs = new Set(done.map((s) => s.req));
    for (const p of reqs) {
      if (p.seqs.every((s) => s.finish)) {
        p.resolve({
          samples: p.seqs.map((s) => ({
            tokenIds: s.out,
            logprobs: s.logprobs,
            finishReason: s.finish!,
            ...(s.allowed ? { allowed: s.allowed.perToken } : {}),
          })),
          promptTokens: p.req.promptIds.length,
          cachedPromptTokens: p.cached,
        });
      }
    }
  }
}
