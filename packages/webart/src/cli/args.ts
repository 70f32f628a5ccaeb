// The commands' options: one spec per command, read by node:util parseArgs (strict) and written out as its usage
// text, so help and parsing cannot disagree; value checks (numbers, choices, sizes) whose errors name the flag.
import { parseArgs, type ParseArgsConfig } from "node:util";
import { parseBytes } from "@webart/engine";

/** One option: `--name VALUE` (string) or `--name` (flag). */
export interface Option {
  help: string;
  /** Placeholder in the usage line, e.g. "N", "DIR" (string options). */
  arg?: string;
  /** The value when the option is not given (string options). */
  default?: string;
  /** An on/off option that takes no value. */
  flag?: true;
}
export type Spec = Record<string, Option>;

/** A command's name, what it does (a paragraph for its --help) and its options. */
export interface CommandSpec<S extends Spec = Spec> {
  name: string;
  about: string;
  options: S;
}

/** Parsed options: flags are booleans, options with a default strings, the rest string | undefined. */
export type Values<S extends Spec> = {
  [K in keyof S]: S[K] extends { flag: true }
    ? boolean
    : S[K] extends { default: string }
      ? string
      : string | undefined;
};

/** A command line the command cannot run (code 2: message and usage on stderr), or --help (code 0). */
/** Refuses each of `keys` given on the command line (as --key or --key=...): they are not for `what`. */
export function refuseGiven(argv: readonly string[], keys: readonly string[], what: string): void {
  for (const k of keys)
    if (argv.some((x) => x === `--${k}` || x.startsWith(`--${k}=`))) throw new UsageError(`--${k} is not for ${what}`);
}

export class UsageError extends Error {
  override name = "UsageError";
  constructor(
    message: string,
    readonly code: 0 | 2 = 2,
  ) {
    super(message);
  }
}

const COLUMN = 28;

export function usage(cmd: CommandSpec): string {
  // An option too long for the column gets its help on the next line rather than running into it.
  const row = (left: string, help: string) =>
    (`  ${left}`.length < COLUMN ? `  ${left}`.padEnd(COLUMN) : `  ${left}\n${" ".repeat(COLUMN)}`) +
    help.split("\n").join("\n" + " ".repeat(COLUMN));
  const rows = Object.entries(cmd.options).map(([k, o]) =>
    row(
      `--${k}${o.flag ? "" : ` ${o.arg ?? "X"}`}`,
      o.help + (o.default !== undefined ? ` (default ${o.default})` : ""),
    ),
  );
  rows.push(row("-h, --help", "print this help"));
  return `usage: webart ${cmd.name} [options]\n\n${cmd.about}\n\noptions:\n${rows.join("\n")}\n`;
}

/** Parses argv against the spec; --help and every malformed or unknown option throw UsageError. */
export function parseOptions<S extends Spec>(cmd: CommandSpec<S>, argv: string[]): Values<S> {
  const options: NonNullable<ParseArgsConfig["options"]> = { help: { type: "boolean", short: "h" } };
  for (const [k, o] of Object.entries(cmd.options)) {
    options[k] = o.flag
      ? { type: "boolean", default: false }
      : o.default !== undefined
        ? { type: "string", default: o.default }
        : { type: "string" };
  }
  // --help wins over anything else on the line, as in most commands.
  if (argv.includes("--help") || argv.includes("-h")) throw new UsageError("--help", 0);
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values as typeof values;
  } catch (e) {
    throw new UsageError(explain(argv, options) ?? (e as Error).message);
  }
  delete values.help;
  return values as Values<S>;
}

/** Why strict parsing refused argv, from the lenient parse's tokens (parseArgs' own messages are long). */
function explain(argv: string[], options: NonNullable<ParseArgsConfig["options"]>): string | undefined {
  const { tokens } = parseArgs({ args: argv, options, strict: false, allowPositionals: true, tokens: true });
  for (const t of tokens) {
    if (t.kind === "positional") return `unexpected argument ${JSON.stringify(t.value)} (options are --name value)`;
    if (t.kind !== "option") continue;
    const o = options[t.name];
    if (!o) return `unknown option ${JSON.stringify(t.rawName)}`;
    if (o.type === "boolean" && t.value !== undefined)
      return `${t.rawName} takes no value (got ${JSON.stringify(t.value)})`;
    if (o.type === "string" && t.value === undefined) return `${t.rawName} needs a value`;
    if (o.type === "string" && !t.inlineValue && t.value!.startsWith("-")) {
      // parseArgs takes no value that starts with "-" after a space: a negative number or a forgotten value.
      return /^-\.?\d/.test(t.value!)
        ? `${t.rawName} ${t.value}: write ${t.rawName}=${t.value} for a value that starts with "-"`
        : `${t.rawName} needs a value (got the option ${JSON.stringify(t.value)})`;
    }
  }
  return undefined;
}

/** A number from option `name`'s text; `int`, `min` and `max` narrow it. */
export function num(name: string, v: string, opts: { int?: boolean; min?: number; max?: number } = {}): number {
  const n = v.trim() === "" ? NaN : Number(v);
  const { int, min, max } = opts;
  if (
    !Number.isFinite(n) ||
    (int && !Number.isInteger(n)) ||
    (min !== undefined && n < min) ||
    (max !== undefined && n > max)
  ) {
    const range =
      min !== undefined && max !== undefined
        ? ` in [${min}, ${max}]`
        : min !== undefined
          ? ` >= ${min}`
          : max !== undefined
            ? ` <= ${max}`
            : "";
    throw new UsageError(`--${name} ${JSON.stringify(v)}: expected ${int ? "an integer" : "a number"}${range}`);
  }
  return n;
}

/** Option `name`'s text when it is one of `choices`. */
export function oneOf<T extends string>(name: string, v: string, choices: readonly T[]): T {
  if (!(choices as readonly string[]).includes(v))
    throw new UsageError(
      `--${name} ${JSON.stringify(v)}: expected ${choices.length > 1 ? `${choices.slice(0, -1).join(", ")} or ` : ""}${choices[choices.length - 1]}`,
    );
  return v as T;
}

/** A size like 6GB or 4096MiB, in bytes (undefined stays undefined: the engine's default). */
export function bytes(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  try {
    return parseBytes(v, `--${name}`);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** The --quantize option of the commands that load a base model for a run or a server. */
export const QUANTIZE_OPTION = {
  quantize: {
    arg: "q4",
    help: "load the model's weights as 4-bit ones (groups of 32 with a bf16 scale: about 0.28 of their\n16-bit bytes); a run trained so goes on and is evaluated so",
  },
} as const;

/** --quantize's value: q4, or undefined when not given. */
export function quantizeOption(v: string | undefined): "q4" | undefined {
  return v === undefined ? undefined : oneOf("quantize", v, ["q4"] as const);
}
