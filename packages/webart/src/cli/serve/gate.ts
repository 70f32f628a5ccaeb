// Training steps and inference on the same model: steps run one at a time per model, and a chat request
// for a model that is training waits for the step (bounded; past the bound, 503 with Retry-After).

interface Active {
  started: number;
  done: Promise<void>;
}

export class TrainGate {
  private active = new Map<string, Active>();
  private tails = new Map<string, Promise<unknown>>();
  private lastSeconds = new Map<string, number>();

  /** Runs `f` (a training step of model `name`) after the model's earlier steps; chats to `name` wait meanwhile. */
  run<T>(name: string, f: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(name) ?? Promise.resolve();
    const mine = prev.then(async () => {
      let release!: () => void;
      const a: Active = { started: performance.now(), done: new Promise<void>((r) => (release = r)) };
      this.active.set(name, a);
      try {
        return await f();
      } finally {
        this.active.delete(name);
        this.lastSeconds.set(name, (performance.now() - a.started) / 1000);
        release();
      }
    });
    const tail = mine.catch(() => {});
    this.tails.set(name, tail);
    void tail.then(() => this.tails.get(name) === tail && this.tails.delete(name));
    return mine;
  }

  /** Models with a step running now. */
  training(): string[] {
    return [...this.active.keys()];
  }

  /** Steps running or queued (for shutdown). */
  pending(): Promise<unknown>[] {
    return [...this.tails.values()];
  }

  /**
   * Waits while `name` trains, at most `maxMs`. Returns null when the request may go ahead, or the
   * seconds a client should wait before retrying (the last step's duration minus the time elapsed).
   */
  async wait(name: string, maxMs: number): Promise<number | null> {
    const deadline = performance.now() + maxMs;
    for (;;) {
      const a = this.active.get(name);
      if (!a) return null;
      const left = deadline - performance.now();
      if (left <= 0) {
        const elapsed = (performance.now() - a.started) / 1000;
        const last = this.lastSeconds.get(name);
        return Math.max(1, Math.ceil(last !== undefined ? last - elapsed : elapsed));
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([a.done, new Promise<void>((r) => (timer = setTimeout(r, left)))]);
      clearTimeout(timer);
    }
  }
}
