// gatherTrajectoryGroups: runs the rollouts of many groups with bounded concurrency, captures
// exceptions (up to maxExceptions), lets afterEach rescore or drop a group (RULER plugs in here),
// and reports progress (a bar on a Node terminal).
import { Trajectory, TrajectoryGroup, type CapturedException, type TrajectoryLike } from "./trajectories.ts";

/** A group to gather: rollout thunks (concurrency-bounded), or a group (promise or thunk). */
export type GroupInput =
  (() => Promise<TrajectoryLike>)[] | Promise<TrajectoryGroup> | (() => Promise<TrajectoryGroup>);

export interface GatherProgress {
  done: number;
  /** Trajectories expected in all (groups given as promises count once they finish). */
  total: number;
  exceptions: number;
  rewardMean: number;
  elapsedSeconds: number;
  etaSeconds: number;
}

export interface GatherOptions {
  /** Rollouts running at once (default: all). */
  concurrency?: number;
  /** Exceptions tolerated: a count, or a fraction (0..1) of all rollouts. Default 0: any exception throws. */
  maxExceptions?: number;
  /** Called with each finished group: return it (possibly rescored), null to drop it, or several groups. */
  afterEach?: (
    group: TrajectoryGroup,
  ) => TrajectoryGroup | null | TrajectoryGroup[] | Promise<TrajectoryGroup | null | TrajectoryGroup[]>;
  onProgress?: (p: GatherProgress) => void;
  /** "auto" draws a progress bar when stderr is a Node TTY. */
  progressBar?: "auto" | "off";
  description?: string;
}

export class TooManyExceptionsError extends Error {
  constructor(
    readonly exceptions: CapturedException[],
    allowed: number,
  ) {
    super(
      `gatherTrajectoryGroups: ${exceptions.length} rollouts failed (allowed: ${allowed}). First: ${exceptions[0].type}: ${exceptions[0].message}`,
    );
    this.name = "TooManyExceptionsError";
  }
}

function semaphore(n: number): <T>(f: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: (() => void)[] = [];
  return async (f) => {
    if (active >= n) await new Promise<void>((r) => queue.push(r));
    active++;
    try {
      return await f();
    } finally {
      active--;
      queue.shift()?.();
    }
  };
}

function progressBar(description: string): ((p: GatherProgress) => void) | undefined {
  const out = (globalThis as { process?: { stderr?: { isTTY?: boolean; write(s: string): void } } }).process?.stderr;
  if (!out?.isTTY) return undefined;
  return (p) => {
    const width = 24;
    const frac = p.total ? p.done / p.total : 0;
    const bar = "█".repeat(Math.round(frac * width)).padEnd(width, "·");
    const eta = Number.isFinite(p.etaSeconds) ? `${Math.round(p.etaSeconds)}s` : "?";
    out.write(
      `\r${description} ${bar} ${p.done}/${p.total} reward=${p.rewardMean.toFixed(3)} exc=${p.exceptions} eta=${eta}   ` +
        (p.done === p.total ? "\n" : ""),
    );
  };
}

export async function gatherTrajectoryGroups(
  groups: GroupInput[],
  opts: GatherOptions = {},
): Promise<TrajectoryGroup[]> {
  const limit = semaphore(opts.concurrency && opts.concurrency > 0 ? opts.concurrency : Infinity);
  const bar = opts.progressBar === "off" ? undefined : progressBar(opts.description ?? "gather");
  const t0 = Date.now();
  let total = groups.reduce((s, g) => s + (Array.isArray(g) ? g.length : 0), 0);
  let done = 0;
  let rewardSum = 0;
  let rewardCount = 0;
  const exceptions: CapturedException[] = [];
  const report = () => {
    const elapsed = (Date.now() - t0) / 1000;
    const p: GatherProgress = {
      done,
      total,
      exceptions: exceptions.length,
      rewardMean: rewardCount ? rewardSum / rewardCount : 0,
      elapsedSeconds: elapsed,
      etaSeconds: done ? (elapsed / done) * (total - done) : Infinity,
    };
    opts.onProgress?.(p);
    bar?.(p);
  };
  const onEach = (t: Trajectory | null, e?: CapturedException) => {
    done++;
    // A trajectory scored later (e.g. by RULER in afterEach) has no reward yet.
    if (t && Number.isFinite(t.reward)) {
      rewardSum += t.reward;
      rewardCount++;
    }
    if (e) exceptions.push(e);
    report();
  };

  const results = await Promise.all(
    groups.map(async (g) => {
      let group: TrajectoryGroup;
      if (Array.isArray(g)) {
        group = await TrajectoryGroup.from(
          g.map((thunk) => () => limit(thunk)),
          onEach,
        );
      } else {
        group = await (typeof g === "function" ? limit(g) : g);
        total += group.trajectories.length + group.exceptions.length;
        for (const t of group.trajectories) onEach(t);
        for (const e of group.exceptions) onEach(null, e);
      }
      const after = opts.afterEach ? await opts.afterEach(group) : group;
      return after === null ? [] : Array.isArray(after) ? after : [after];
    }),
  );
  const maxExc = opts.maxExceptions ?? 0;
  const allowed = maxExc > 0 && maxExc < 1 ? Math.floor(maxExc * total) : maxExc;
  if (exceptions.length > allowed) throw new TooManyExceptionsError(exceptions, allowed);
  return results.flat();
}
