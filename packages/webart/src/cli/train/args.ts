// `--name value` / `--flag` parsing for the train and eval commands; unknown options are an error.
export type Spec = Record<string, { default?: string; flag?: boolean; help: string }>;

export function parse<S extends Spec>(argv: string[], spec: S, usage: string): Record<keyof S, string> & { _flags: Set<string> } {
  const out: Record<string, string> = {};
  const flags = new Set<string>();
  for (const [k, v] of Object.entries(spec)) if (v.default !== undefined) out[k] = v.default;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--help" || a === "-h") throw new UsageError(usage, 0);
    const name = a.replace(/^--/, "");
    const s = spec[name];
    if (!a.startsWith("--") || !s) throw new UsageError(`unknown option "${a}"\n\n${usage}`, 2);
    if (s.flag) flags.add(name);
    else {
      const v = argv[++i];
      if (v === undefined || v.startsWith("--")) throw new UsageError(`--${name} needs a value\n\n${usage}`, 2);
      out[name] = v;
    }
  }
  return Object.assign(out as Record<keyof S, string>, { _flags: flags });
}

export class UsageError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

export function num(name: string, v: string, opts: { int?: boolean; min?: number } = {}): number {
  const n = Number(v);
  if (!Number.isFinite(n) || (opts.int && !Number.isInteger(n)) || (opts.min !== undefined && n < opts.min)) {
    throw new UsageError(`--${name} ${JSON.stringify(v)}: expected ${opts.int ? "an integer" : "a number"}${opts.min !== undefined ? ` >= ${opts.min}` : ""}`, 2);
  }
  return n;
}

export function usage(cmd: string, spec: Spec): string {
  const rows = Object.entries(spec).map(([k, v]) => `  --${k}${v.flag ? "" : " X"}`.padEnd(30) + v.help + (v.default !== undefined ? ` (default ${v.default})` : ""));
  return `usage: webart ${cmd} [options]\n\n${rows.join("\n")}`;
}
