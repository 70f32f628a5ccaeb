// Errors across the worker boundary: comlink transfer handlers (installed on both sides) that keep an error's
// name, message, stack and cause, whether it is thrown or passed as a value.
import * as Comlink from "comlink";
import type { SerializedError } from "./api.ts";

interface Wire extends SerializedError {
  cause?: Wire;
}

export function serializeError(e: unknown): Wire {
  if (e instanceof Error) {
    const w: Wire = { name: e.name, message: e.message, stack: e.stack };
    if (e.cause !== undefined) w.cause = serializeError(e.cause);
    return w;
  }
  return { name: "Error", message: typeof e === "string" ? e : JSON.stringify(e) };
}

export function deserializeError(w: Wire): Error {
  const e = new Error(w.message, w.cause ? { cause: deserializeError(w.cause) } : undefined);
  e.name = w.name;
  if (w.stack) e.stack = w.stack;
  return e;
}

let installed = false;

/** Registers the handlers; call once in the page and once in the worker. */
export function installErrorTransfer(): void {
  if (installed) return;
  installed = true;
  const throwHandler = Comlink.transferHandlers.get("throw")!;
  Comlink.transferHandlers.set("throw", {
    canHandle: throwHandler.canHandle,
    serialize: (thrown: unknown) => {
      const value = (thrown as { value: unknown }).value;
      return [{ isError: value instanceof Error, value: value instanceof Error ? serializeError(value) : value }, []];
    },
    deserialize: (s: unknown) => {
      const { isError, value } = s as { isError: boolean; value: unknown };
      throw isError ? deserializeError(value as Wire) : value;
    },
  });
  Comlink.transferHandlers.set("error", {
    canHandle: (v: unknown): v is Error => v instanceof Error,
    serialize: (e: Error) => [serializeError(e), []],
    deserialize: (w: unknown) => deserializeError(w as Wire),
  });
}
