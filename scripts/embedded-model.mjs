// The modules that `virtual:webart-tiny` and `virtual:webart-tools` stand for: every file of models/<name> as
// bytes, base64 in the source and decoded once when the module is first imported (the engine imports one only
// when that model is asked for). A folder that is missing gives an empty module: the engine then says how to make it.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";

/** The embedded models: webart-tiny (the default, tic-tac-toe and 2048) and webart-tools (the email agent's). */
export const EMBEDDED_NAMES = ["webart-tiny", "webart-tools"];
export const MODELS_DIR = new URL("../models/", import.meta.url);

/** `virtual:<name>` for an embedded model's name, else null. */
export function embeddedModelName(id) {
  const name = id.startsWith("virtual:") ? id.slice("virtual:".length) : null;
  return name && EMBEDDED_NAMES.includes(name) ? name : null;
}

export function embeddedModelModule(name) {
  if (!EMBEDDED_NAMES.includes(name)) throw new Error(`no embedded model ${name} (${EMBEDDED_NAMES.join(", ")})`);
  const dir = new URL(`${name}/`, MODELS_DIR);
  const names = existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => statSync(new URL(f, dir)).isFile() && f !== "pretrain.json" && f !== "README.md")
        .sort()
    : [];
  const entries = names.map(
    (f) => `  ${JSON.stringify(f)}: bytes(${JSON.stringify(readFileSync(new URL(f, dir)).toString("base64"))}),`,
  );
  return [
    "const bytes = (b64) => {",
    "  const s = atob(b64);",
    "  const out = new Uint8Array(s.length);",
    "  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);",
    "  return out;",
    "};",
    "export default {",
    ...entries,
    "};",
    "",
  ].join("\n");
}
