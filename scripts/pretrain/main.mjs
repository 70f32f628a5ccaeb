// `npm run pretrain`: set-up, then scripts/pretrain/pretrain.ts with the given arguments. npm also runs this
// script as the "pre" hook of `npm run train` (hook.mjs); then it does nothing.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { runAsHookOf } from "./hook.mjs";

const hookOf = runAsHookOf(process.env.npm_lifecycle_event);
if (hookOf) {
  console.log(`(npm runs "pretrain" before "${hookOf}" as a hook; skipped. To make the embedded model: npm run pretrain)`);
  process.exit(0);
}
const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const node = (args) => spawnSync(process.execPath, args, { cwd: root, stdio: "inherit" }).status ?? 1;
let rc = node([join(root, "scripts/setup.mjs")]);
if (rc === 0) rc = node(["--import", "tsx", "--import", "./scripts/wgsl-loader.mjs", "scripts/pretrain/pretrain.ts", ...process.argv.slice(2)]);
process.exit(rc);
