// Tiny `--name value` argument reader for the pretraining scripts; unknown names are an error.
export function parseArgs<T extends Record<string, string>>(usage: string, defaults: T): T {
  const out: Record<string, string> = { ...defaults };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, "");
    if (argv[i] === "--help" || argv[i] === "-h") {
      console.log(usage);
      process.exit(0);
    }
    if (!argv[i].startsWith("--") || !(name in defaults) || argv[i + 1] === undefined) {
      console.error(`unknown or incomplete argument "${argv[i]}"\n${usage}`);
      process.exit(2);
    }
    out[name] = argv[i + 1];
  }
  for (const [k, v] of Object.entries(out))
    if (v === "") {
      console.error(`--${k} is required\n${usage}`);
      process.exit(2);
    }
  return out as T;
}

export function int(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new Error(`--${name} ${JSON.stringify(value)} must be a non-negative integer`);
  return n;
}
