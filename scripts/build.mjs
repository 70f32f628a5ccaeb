#!/usr/bin/env node
// Builds the packages, ground floor first: each to dist/ as ESM JavaScript (esbuild: WGSL inlined as text, the
// embedded model as bytes, source maps) with .d.ts types and declaration maps (tsc -b). Other packages stay
// imports, so each package is its own file set, as npm installs them.
//   node scripts/build.mjs            build every package
//   node scripts/build.mjs --if-stale  only when a source is newer than the last build (setup uses this)
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { kernelsFingerprint } from "./kernels-fingerprint.mjs";
import { embeddedModelModule, embeddedModelName, EMBEDDED_NAMES, MODELS_DIR } from "./embedded-model.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Build order: each package after those it imports. */
export const PACKAGES = ["gpu", "shaders", "engine", "envs", "ruler", "webart"];
/** Entry points beyond the package's exports: the command. */
const EXTRA = { webart: { cli: "./src/cli/main.ts" } };
const STAMP = join(root, ".cache", "build-stamp");

function newest(dir, skip = /\.test\.ts$/) {
  let t = 0;
  for (const f of readdirSync(dir, { recursive: true, encoding: "utf8" })) {
    if (skip.test(f)) continue;
    const s = statSync(join(dir, f));
    if (s.isFile()) t = Math.max(t, s.mtimeMs);
  }
  return t;
}

function isStale() {
  if (!existsSync(STAMP)) return true;
  const built = statSync(STAMP).mtimeMs;
  const inputs = [
    ...PACKAGES.flatMap((p) => [join(root, "packages", p, "src"), join(root, "packages", p, "package.json")]),
    ...EMBEDDED_NAMES.map((n) => fileURLToPath(new URL(n, MODELS_DIR))).filter((p) => existsSync(p)),
    join(root, "scripts", "build.mjs"),
    join(root, "scripts", "kernels-fingerprint.mjs"),
    join(root, "tsconfig.base.json"),
  ];
  if (PACKAGES.some((p) => !existsSync(join(root, "packages", p, "dist", "index.js")))) return true;
  return inputs.some((p) => (statSync(p).isDirectory() ? newest(p) : statSync(p).mtimeMs) > built);
}

const embedded = {
  name: "webart-embedded-model",
  setup(b) {
    b.onResolve({ filter: /^virtual:webart-/ }, (a) =>
      embeddedModelName(a.path) ? { path: a.path, namespace: "webart" } : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: "webart" }, (a) => ({
      contents: embeddedModelModule(embeddedModelName(a.path)),
      loader: "js",
    }));
  },
};

async function buildPackage(name) {
  const dir = join(root, "packages", name);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const entryPoints = {};
  for (const [sub, targets] of Object.entries(pkg.exports)) {
    const out = targets.default.replace(/^\.\/dist\//, "").replace(/\.js$/, "");
    entryPoints[out] = join(dir, targets["webart-source"]);
    if (!targets.types.endsWith(`${out}.d.ts`))
      throw new Error(`${name}: exports["${sub}"] types and default disagree`);
  }
  for (const [out, src] of Object.entries(EXTRA[name] ?? {})) entryPoints[out] = join(dir, src);
  for (const f of ["index.js", "chunks"]) rmSync(join(dir, "dist", f), { recursive: true, force: true });
  await build({
    entryPoints,
    outdir: join(dir, "dist"),
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    sourcemap: true,
    packages: "external",
    external: ["node:*"],
    loader: { ".wgsl": "text" },
    // Start-up tuning saved by one build is reused by another only where the kernels are the same.
    define: { __WEBART_KERNELS__: JSON.stringify(kernelsFingerprint()) },
    chunkNames: "chunks/[name]-[hash]",
    plugins: [embedded],
    logLevel: "warning",
  });
  // The embedded model's chunk is data: a source map of it would only repeat its 2 MB of base64.
  const chunks = join(dir, "dist", "chunks");
  if (existsSync(chunks))
    for (const f of readdirSync(chunks).filter((f) => /^embedded-(tools-)?files-.*\.js$/.test(f))) {
      rmSync(join(chunks, f + ".map"), { force: true });
      const code = readFileSync(join(chunks, f), "utf8").replace(/\n\/\/# sourceMappingURL=.*\n?$/, "\n");
      writeFileSync(join(chunks, f), code);
    }
}

export async function buildAll() {
  const t0 = Date.now();
  for (const p of PACKAGES) await buildPackage(p);
  // Declarations for every package (project references, ground floor first), written beside the JavaScript.
  const tsc = join(root, "node_modules", ".bin", "tsc");
  const r = spawnSync(tsc, ["-b", ...PACKAGES.map((p) => join(root, "packages", p))], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) throw new Error("tsc -b failed: the packages' types have errors (above)");
  mkdirSync(dirname(STAMP), { recursive: true });
  writeFileSync(STAMP, new Date().toISOString());
  return Date.now() - t0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const ifStale = process.argv.includes("--if-stale");
  if (ifStale && !isStale()) process.exit(0);
  try {
    const ms = await buildAll();
    console.log(`[build] ${PACKAGES.length} packages built in ${(ms / 1000).toFixed(1)} s`);
  } catch (e) {
    console.error(`[build] ${e.message}`);
    process.exit(1);
  }
}
