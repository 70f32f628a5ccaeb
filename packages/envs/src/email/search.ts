// What the agent's tools do to an inbox: keyword search (every keyword must appear in the subject or body, any
// case; optional sender and date filters; newest first) and reading one email. Bad arguments (an unknown id, a
// date that is not ISO) are answered with an error the agent can read, as a real API would.
import type { Email, Inbox } from "./inbox.ts";

/** At most this many results per search. */
export const MAX_SEARCH_RESULTS = 10;
const SNIPPET_CHARS = 90;

export interface SearchArgs {
  keywords: string[];
  /** A substring of the sender ("Dana", "dana.lee@example.com"), any case. */
  from?: string;
  /** Only emails sent before this ISO date or time (exclusive). */
  before?: string;
  /** Only emails sent on or after this ISO date or time. */
  after?: string;
}

export interface SearchResult {
  message_id: string;
  date: string;
  from: string;
  subject: string;
  snippet: string;
}

export function searchInbox(inbox: Inbox, args: SearchArgs): { results: SearchResult[] } | { error: string } {
  const keywords = args.keywords.map((k) => k.trim().toLowerCase());
  if (!keywords.length || keywords.some((k) => !k))
    return { error: 'keywords: give at least one non-empty keyword, e.g. ["dentist"]' };
  const bounds: Record<"before" | "after", number | undefined> = { before: undefined, after: undefined };
  for (const k of ["before", "after"] as const) {
    const v = args[k];
    if (v === undefined) continue;
    const t = /^\d{4}-\d{2}-\d{2}/.test(v) ? Date.parse(v) : NaN;
    if (Number.isNaN(t)) return { error: `${k}: ${JSON.stringify(v)} is not an ISO date (e.g. 2024-03-05)` };
    bounds[k] = t;
  }
  const from = args.from?.trim().toLowerCase();
  const results = inbox.emails
    .filter((e) => {
      const t = Date.parse(e.date);
      if (bounds.before !== undefined && !(t < bounds.before)) return false;
      if (bounds.after !== undefined && !(t >= bounds.after)) return false;
      if (from && !e.from.toLowerCase().includes(from)) return false;
      const text = `${e.subject}\n${e.body}`.toLowerCase();
      return keywords.every((k) => text.includes(k));
    })
    .sort((a, b) => (a.date < b.date ? 1 : a.date > b.date ? -1 : 0))
    .slice(0, MAX_SEARCH_RESULTS)
    .map((e) => ({
      message_id: e.id,
      date: e.date.slice(0, 10),
      from: e.from,
      subject: e.subject,
      snippet: snippet(e, keywords[0]),
    }));
  return { results };
}

/** The body around the first keyword's first match, on one line. */
function snippet(e: Email, keyword: string): string {
  const body = e.body.replace(/\s+/g, " ").trim();
  const at = body.toLowerCase().indexOf(keyword);
  const start = Math.max(0, (at < 0 ? 0 : at) - 30);
  const end = Math.min(body.length, start + SNIPPET_CHARS);
  return `${start > 0 ? "…" : ""}${body.slice(start, end)}${end < body.length ? "…" : ""}`;
}

export function readEmail(inbox: Inbox, messageId: string): Email | { error: string } {
  const e = inbox.emails.find((x) => x.id === messageId.trim());
  return e ?? { error: `message_id ${JSON.stringify(messageId)}: no such email (ids look like "m1234")` };
}
