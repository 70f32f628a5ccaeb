#!/usr/bin/env node
// First step of `npm start`, `npm test`, `npm run bench` ...: makes a fresh machine ready.
// 1. npm dependencies: installed with `npm ci` when missing or older than package-lock.json.
// 2. The packages, built to packages/*/dist when a source changed since the last build (scripts/build.mjs).
// 3. WebGPU in Node: if Dawn finds no adapter on Linux, Debian's SwiftShader (chromium + libvulkan1)
//    is installed when running as root, else the exact apt command is printed.
// 4. Chromium for the browser tests (same package), when `--browser` is given.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const wantBrowser = process.argv.includes("--browser");
const say = (m) => console.log(`[setup] ${m}`);

function npmDeps() {
  const lock = readFileSync(join(root, "package-lock.json"));
  const pkg = readFileSync(join(root, "package.json"));
  const hash = createHash("sha256").update(lock).update(pkg).digest("hex");
  const stamp = join(root, "node_modules", ".webart-deps");
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === hash) return;
  say(existsSync(join(root, "node_modules")) ? "dependencies changed: npm ci" : "installing dependencies: npm ci");
  const r = spawnSync("npm", ["ci", "--no-audit", "--no-fund"], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) {
    console.error("[setup] `npm ci` failed; fix the error above and run the command again.");
    process.exit(r.status ?? 1);
  }
  writeFileSync(stamp, hash);
}

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

function aptInstall(pkgs, why) {
  const cmd = `apt-get update && apt-get install -y ${pkgs.join(" ")}`;
  if (process.platform !== "linux" || !existsSync("/usr/bin/apt-get")) {
    console.error(`[setup] ${why}. Install ${pkgs.join(", ")} with your system's package manager.`);
    process.exit(1);
  }
  if (!isRoot) {
    console.error(`[setup] ${why}. Run:\n  sudo ${cmd}\nthen run this command again.`);
    process.exit(1);
  }
  say(`${why}: installing ${pkgs.join(" ")} (Debian packages)`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  for (const args of [
    ["update", "-qq"],
    ["install", "-y", "-qq", "--no-install-recommends", ...pkgs],
  ]) {
    const r = spawnSync("apt-get", args, { stdio: "inherit", env });
    if (r.status !== 0) {
      console.error(`[setup] \`apt-get ${args.join(" ")}\` failed (exit ${r.status}).`);
      process.exit(1);
    }
  }
}

/** Asks Dawn, in a child process, whether an adapter can be had (with the SwiftShader fallback). */
function hasWebGpu() {
  const probe = `
    const { findAdapter } = await import(${JSON.stringify(pathToFileURL(join(root, "packages/gpu/dist/index.js")).href)});
    try { const a = await findAdapter(); console.log("ADAPTER " + a.adapter.info.description); }
    catch (e) { console.log("NOADAPTER " + e.message); }
    process.exit(0);`;
  try {
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", probe], {
      cwd: root,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 60_000,
    });
    return out.includes("ADAPTER ") && !out.includes("NOADAPTER");
  } catch {
    return false;
  }
}

function buildPackages() {
  const r = spawnSync(process.execPath, [join(root, "scripts/build.mjs"), "--if-stale"], {
    cwd: root,
    stdio: "inherit",
  });
  if (r.status !== 0) {
    console.error("[setup] building the packages failed; see the errors above.");
    process.exit(r.status ?? 1);
  }
}

npmDeps();
buildPackages();
if (process.platform === "linux") {
  if (!hasWebGpu()) {
    aptInstall(["chromium", "libvulkan1"], "no WebGPU adapter in Node (no GPU driver and no SwiftShader)");
    if (!hasWebGpu()) {
      console.error("[setup] still no WebGPU adapter after installing SwiftShader; see the errors above.");
      process.exit(1);
    }
  }
  if (wantBrowser && !existsSync("/usr/bin/chromium"))
    aptInstall(["chromium"], "Chromium is needed for the browser tests");
}
