#!/usr/bin/env node
// `npm test`: set-up, typecheck, lint (ESLint), format (Prettier --check), unit/integration tests on Dawn (Vitest), the web app build and the
// browser tests (Playwright in Chromium). Ends with one summary line "N passed, M failed[, K skipped]".
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => join(root, "node_modules", ".bin", name);
const run = (cmd, args, env = {}) =>
  spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } }).status ?? 1;
const out = join(root, ".cache", "test");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

let status = run(process.execPath, [join(root, "scripts/setup.mjs"), "--browser"]);
if (status !== 0) process.exit(status);
const t0 = Date.now();
const steps = [];
const step = (name, code) => {
  steps.push(`${name}: ${code === 0 ? "ok" : `failed (exit ${code})`}`);
  return code;
};
const typecheck = step("typecheck", run(bin("tsc"), ["-b"]));
const lint = step("lint", run(bin("eslint"), ["."]));
const format = step("format", run(bin("prettier"), ["--check", "--log-level", "warn", "."]));
const unit = step(
  "vitest",
  run(bin("vitest"), ["run", "--reporter=default", "--reporter=json", `--outputFile.json=${join(out, "vitest.json")}`]),
);
const build = step("build", run(bin("vite"), ["build"]));
const e2e =
  build === 0
    ? step(
        "playwright",
        run(bin("playwright"), ["test", "--reporter=list,json"], {
          PLAYWRIGHT_JSON_OUTPUT_NAME: join(out, "playwright.json"),
        }),
      )
    : 1;

let passed = 0;
let failed = 0;
let skipped = 0;
if (existsSync(join(out, "vitest.json"))) {
  const v = JSON.parse(readFileSync(join(out, "vitest.json"), "utf8"));
  passed += v.numPassedTests ?? 0;
  failed += v.numFailedTests ?? 0;
  skipped += (v.numPendingTests ?? 0) + (v.numTodoTests ?? 0);
}
const flaky = [];
if (existsSync(join(out, "playwright.json"))) {
  const report = JSON.parse(readFileSync(join(out, "playwright.json"), "utf8"));
  const s = report.stats ?? {};
  // A browser test that failed and then passed on CI's one retry (playwright.config.ts) counts as passed, and is
  // named below so that it is seen.
  passed += (s.expected ?? 0) + (s.flaky ?? 0);
  failed += s.unexpected ?? 0;
  skipped += s.skipped ?? 0;
  const walk = (suite) => {
    for (const spec of suite.specs ?? [])
      for (const t of spec.tests ?? []) if (t.status === "flaky") flaky.push(`${spec.file}: ${spec.title}`);
    for (const child of suite.suites ?? []) walk(child);
  };
  for (const suite of report.suites ?? []) walk(suite);
}
// A step that failed without reporting a test failure (typecheck, build, a crash) counts as one.
for (const code of [typecheck, lint, format, build]) if (code !== 0) failed += 1;
if ((unit !== 0 || e2e !== 0) && failed === 0) failed = 1;
console.log(`\n${steps.join("; ")} (${((Date.now() - t0) / 60000).toFixed(1)} min)`);
for (const f of flaky) console.log(`flaky (failed, then passed on its retry): ${f}`);
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
