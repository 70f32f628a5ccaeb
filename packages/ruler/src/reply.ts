// Reads the judge's answer: finds the JSON object in the reply text and checks it strictly (every id
// exactly once, scores finite numbers in [0, 1]); anything else is refused with the reason why.

/** One trajectory's verdict. */
export interface TrajectoryScore {
  trajectoryId: string;
  score: number;
  explanation: string;
}

/** The judge answered, but not usably: `reason` says why, `reply` is what it sent. */
export class RefusedReply extends Error {
  constructor(
    readonly reason: string,
    readonly reply: string,
  ) {
    super(reason);
    this.name = "RefusedReply";
  }
}

/** End index (exclusive) of the balanced {...} starting at `start`, skipping braces inside strings; -1 if none. */
function balancedEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{") depth++;
    else if (c === "}" && --depth === 0) return i + 1;
  }
  return -1;
}

/**
 * The JSON object in a reply. Judges that ignore response_format often wrap the answer in a
 * ```json fence or put text (or a <think> block) before it, so when the whole reply is not JSON
 * this takes the first balanced {...} that parses and has a "scores" key, else the first that parses.
 */
export function extractJsonObject(text: string): unknown {
  const trimmed = text.trim();
  try {
    return JSON.parse(trimmed);
  } catch {
    // fall through to the search below
  }
  let firstParsed: unknown;
  for (let start = trimmed.indexOf("{"); start >= 0; start = trimmed.indexOf("{", start + 1)) {
    const end = balancedEnd(trimmed, start);
    if (end < 0) continue;
    let value: unknown;
    try {
      value = JSON.parse(trimmed.slice(start, end));
    } catch {
      continue;
    }
    if (value !== null && typeof value === "object" && "scores" in value) return value;
    firstParsed ??= value;
  }
  if (firstParsed !== undefined) return firstParsed;
  throw new RefusedReply("the reply is not JSON and contains no parseable JSON object", text);
}

const show = (v: unknown) => (typeof v === "string" ? JSON.stringify(v) : String(JSON.stringify(v) ?? v));

/**
 * Parses and checks the reply text against the ids that were judged, returning the scores in the
 * order of `ids` (matched by trajectory_id, never by position). With `clamp`, a finite score outside
 * [0, 1] is clamped instead of refused; a non-number or non-finite score is always refused.
 */
export function parseScores(text: string, ids: string[], clamp = false): TrajectoryScore[] {
  const value = extractJsonObject(text);
  const entries = (value as { scores?: unknown } | null)?.scores;
  if (!Array.isArray(entries)) throw new RefusedReply('expected an object with a "scores" array', text);
  const problems: string[] = [];
  if (entries.length !== ids.length) problems.push(`expected ${ids.length} scores, got ${entries.length}`);
  const byId = new Map<string, TrajectoryScore>();
  const seen = new Set<string>();
  const known = new Set(ids);
  entries.forEach((e, i) => {
    if (e === null || typeof e !== "object") return problems.push(`scores[${i}] is ${show(e)}, expected an object`);
    const { trajectory_id: rawId, explanation, score } = e as Record<string, unknown>;
    // An integer id (1 for "1") is unambiguous, so it is accepted.
    const id = typeof rawId === "string" ? rawId.trim() : Number.isInteger(rawId) ? String(rawId) : undefined;
    if (id === undefined || !known.has(id)) {
      const expected = ids.map((x) => `"${x}"`).join(", ");
      return problems.push(`scores[${i}].trajectory_id ${show(rawId)} is not one of ${expected}`);
    }
    if (seen.has(id)) return problems.push(`trajectory_id "${id}" appears more than once`);
    seen.add(id);
    if (typeof score !== "number" || !Number.isFinite(score)) {
      return problems.push(`score for trajectory "${id}" is ${show(score)}, expected a finite number in [0, 1]`);
    }
    let s = score;
    if (s < 0 || s > 1) {
      if (!clamp) {
        return problems.push(`score for trajectory "${id}" is ${s}, outside [0, 1] (clampScores: true clamps it)`);
      }
      s = Math.min(1, Math.max(0, s));
    }
    byId.set(id, { trajectoryId: id, score: s, explanation: typeof explanation === "string" ? explanation : "" });
  });
  const missing = ids.filter((id) => !seen.has(id));
  if (missing.length) problems.push(`no score for trajectory ${missing.map((x) => `"${x}"`).join(", ")}`);
  if (problems.length) throw new RefusedReply(problems.join("; "), text);
  return ids.map((id) => byId.get(id)!);
}
