// How Node's Dawn learns that GPU work is done. Dawn's binding (npm `webgpu`) polls: while any of its promises is
// pending (mapAsync, onSubmittedWorkDone, popErrorScope), it passes setImmediate a native callback that processes
// Dawn's events and queues itself again, so the JS thread spins for as long as the GPU works. On a GPU that costs
// one core of many. On a CPU device (SwiftShader) the device's own threads do the work, and the spinning thread
// takes a core from them: on 2 cores a rollout step ran ~1.5x slower for it (`npm run bench -- polling`).
//
// "timer" polling hands those callbacks to setTimeout instead, so the thread sleeps ~1 ms between polls. Only
// Dawn's callbacks are delayed: they are native functions with no name and no parameters, which the program's
// own callbacks, promise resolvers (one parameter) and bound functions (named "bound ...") are not.

export type DawnPolling = "immediate" | "timer";

let mode: DawnPolling = "immediate";
let wrappedOnce = false;
let delayed = 0;

const isDawnPoll = (fn: unknown): boolean =>
  typeof fn === "function" &&
  fn.name === "" &&
  fn.length === 0 &&
  Function.prototype.toString.call(fn).endsWith("{ [native code] }");

/**
 * Sets how Dawn's Node binding polls for finished GPU work: "immediate" (its own way, a setImmediate loop) or
 * "timer" (setTimeout, ~1 ms apart). Node only; the process-wide setImmediate is wrapped while "timer" is on.
 */
export function setDawnPolling(next: DawnPolling): void {
  if (typeof setImmediate !== "function") return;
  if (next === "timer" && !wrappedOnce) {
    wrappedOnce = true;
    const orig = setImmediate;
    const wrapped = ((fn: (...a: unknown[]) => void, ...args: unknown[]) => {
      if (mode === "timer" && isDawnPoll(fn)) {
        delayed++;
        return setTimeout(fn, 0, ...args);
      }
      return orig(fn, ...args);
    }) as typeof setImmediate;
    Object.defineProperties(wrapped, Object.getOwnPropertyDescriptors(orig));
    globalThis.setImmediate = wrapped;
  }
  mode = next;
}

/** The current polling, and how many of Dawn's polls were put on a timer so far. */
export function dawnPolling(): { mode: DawnPolling; delayed: number } {
  return { mode, delayed };
}
