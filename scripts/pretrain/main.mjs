// `npm run pretrain`: set-up, then `webart pretrain` writing the repo's models/webart-tiny (the embedded model's
// source, tracked by git, so --force there loses nothing git cannot restore), or with --task email
// models/webart-tools (the email agent's model, a second one); with an --out of your own, the
// command's rule holds (a new or empty folder, or --force). npm also runs this script as the "pre" hook of
// `npm run train` (hook.mjs); then it does nothing.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { runAsHookOf } from "./hook.mjs";

const hookOf = runAsHookOf(process.env.npm_lifecycle_event);
if (hookOf) {
  console.log(
    `(npm runs "pretrain" before "${hookOf}" as a hook; skipped. To make the embedded model: npm run pretrain)`,
  );
  process.exit(0);
}
const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const node = (args) => spawnSync(process.execPath, args, { cwd: root, stdio: "inherit" }).status ?? 1;
const args = process.argv.slice(2);
const ownOut = args.some((a) => a === "--out" || a.startsWith("--out="));
// The email model is a second model (models/README.md): it never replaces webart-tiny.
const email = args.some((a, i) => a === "--task=email" || (a === "--task" && args[i + 1] === "email"));
const repoOut = email ? "models/webart-tools" : "models/webart-tiny";
let rc = node([join(root, "scripts/setup.mjs")]);
if (rc === 0) {
  rc = node([
    join(root, "packages/webart/bin/webart.js"),
    "pretrain",
    ...(ownOut ? [] : ["--out", repoOut, "--force"]),
    ...args,
  ]);
}
process.exit(rc);
