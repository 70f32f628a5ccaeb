// Small formatting helpers for the page.
import type { MessageView } from "./messages.ts";

/** The role label: a tool result names its tool; a forced reply (an exploration move) says so. */
export const roleLabel = (m: MessageView): string =>
  m.role === "tool" && m.toolName ? `tool · ${m.toolName}` : m.forced ? `${m.role} (forced: exploring)` : m.role;

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 2 ** 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 2 ** 30) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  return `${(n / 2 ** 30).toFixed(2)} GiB`;
}

export function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

export function num(v: number, digits = 3): string {
  if (!Number.isFinite(v)) return "—";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return v.toFixed(digits).replace(/\.?0+$/, "") || "0";
}
