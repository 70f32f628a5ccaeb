// The module that `virtual:webart-tiny` stands for: every file of models/webart-tiny as bytes, base64 in the
// source and decoded once when the module is first imported (the engine imports it only for "webart-tiny").
import { readdirSync, readFileSync, statSync } from "node:fs";

export const EMBEDDED_DIR = new URL("../models/webart-tiny/", import.meta.url);

export function embeddedModelModule() {
  const names = readdirSync(EMBEDDED_DIR)
    .filter((f) => statSync(new URL(f, EMBEDDED_DIR)).isFile() && f !== "pretrain.json")
    .sort();
  const entries = names.map(
    (f) =>
      `  ${JSON.stringify(f)}: bytes(${JSON.stringify(readFileSync(new URL(f, EMBEDDED_DIR)).toString("base64"))}),`,
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
