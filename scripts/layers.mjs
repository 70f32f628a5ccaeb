// The packages' layering, checked from their import statements (tests included) and package.json files:
// - an import of a workspace package names the package or one of its exports' subpaths (no deep imports), and
//   no relative import reaches into another package's folder;
// - every workspace package a package imports is declared in its dependencies (or devDependencies, for tests);
// - no cycle between packages;
// - outside tests, a package imports only packages on lower floors (FLOORS), and ruler, envs and the apps never
//   import kernel code (@webart/shaders).
// `node scripts/layers.mjs` prints the violations; scripts/layers.test.ts runs it in `npm test`.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** Floors, ground first: a package's non-test code imports only packages on lower floors. */
export const FLOORS = {
  "@webart/gpu": 0,
  "@webart/shaders": 1,
  "@webart/engine": 2,
  "@webart/envs": 3,
  "@webart/ruler": 3,
  webart: 4,
  "@webart/web": 5,
};
const NO_KERNELS = ["@webart/envs", "@webart/ruler", "webart", "@webart/web"];

const SPEC =
  /(?:^|[^\w$.])(?:import|export)\s*(?:type\s+)?(?:[\w$*{}\s,]+?\s+from\s+)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;

/** Import specifiers of a TypeScript/JavaScript source (comments removed first). */
export function importsOf(code) {
  const text = code.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const out = [];
  for (const m of text.matchAll(SPEC)) out.push(m[1] ?? m[2]);
  return out;
}

function sources(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((f) => /\.(m?[jt]sx?)$/.test(f) && !f.split(sep).includes("node_modules") && !f.split(sep).includes("dist"))
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isFile());
}

/** The workspace packages under `root` (folders of the root package.json's "workspaces" globs "x/*"). */
export function workspacePackages(root) {
  const rootPkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const pkgs = [];
  for (const glob of rootPkg.workspaces ?? []) {
    const base = join(root, glob.replace(/\/\*$/, ""));
    if (!existsSync(base)) continue;
    for (const d of readdirSync(base)) {
      const file = join(base, d, "package.json");
      if (existsSync(file)) pkgs.push({ dir: join(base, d), pkg: JSON.parse(readFileSync(file, "utf8")) });
    }
  }
  return pkgs;
}

const isTest = (f) => /\.test\.[jt]sx?$/.test(f) || /(^|[\\/])(testing|scripted[-\w]*)\.[jt]s$/.test(f);

/** Every layering violation under `root`, as lines naming the file, the import and the rule. */
export function checkLayers(root, floors = FLOORS) {
  const pkgs = workspacePackages(root);
  const byName = new Map(pkgs.map((p) => [p.pkg.name, p]));
  const problems = [];
  const edges = new Map(pkgs.map((p) => [p.pkg.name, new Set()]));
  const nameOf = (spec) => {
    const parts = spec.split("/");
    const name = spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
    return byName.has(name) ? name : null;
  };
  for (const { dir, pkg } of pkgs) {
    const deps = { ...pkg.dependencies, ...pkg.peerDependencies };
    const devDeps = pkg.devDependencies ?? {};
    for (const file of sources(dir)) {
      const rel = relative(root, file);
      const test = isTest(file);
      for (const spec of importsOf(readFileSync(file, "utf8"))) {
        if (spec.startsWith(".")) {
          const target = resolve(dirname(file), spec);
          const owner = pkgs.find((p) => target === p.dir || target.startsWith(p.dir + sep));
          if (owner && owner.dir !== dir)
            problems.push(
              `${rel}: "${spec}" reaches into ${owner.pkg.name}'s files; import "${owner.pkg.name}" instead`,
            );
          continue;
        }
        const name = nameOf(spec);
        if (!name || name === pkg.name) continue;
        const target = byName.get(name).pkg;
        const sub = "." + spec.slice(name.length);
        if (!target.exports || !(sub in target.exports))
          problems.push(
            `${rel}: "${spec}" is a deep import; ${name} exports ${Object.keys(target.exports ?? { ".": 0 }).join(", ")}`,
          );
        if (!(name in deps) && !(test && name in devDeps))
          problems.push(
            `${rel}: imports ${name}, which ${pkg.name}'s package.json does not declare in ${test ? "dependencies or devDependencies" : "dependencies"}`,
          );
        edges.get(pkg.name).add(name);
        if (!test) {
          if (pkg.name in floors && name in floors && floors[name] >= floors[pkg.name])
            problems.push(
              `${rel}: ${pkg.name} (floor ${floors[pkg.name]}) imports ${name} (floor ${floors[name]}), not below it`,
            );
          if (NO_KERNELS.includes(pkg.name) && name === "@webart/shaders")
            problems.push(`${rel}: ${pkg.name} imports kernel code (@webart/shaders)`);
        }
      }
    }
  }
  // Cycles, over imports and declared workspace dependencies alike.
  for (const { pkg } of pkgs)
    for (const d of Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }))
      if (byName.has(d)) edges.get(pkg.name).add(d);
  const state = new Map();
  const stack = [];
  const visit = (n) => {
    state.set(n, 1);
    stack.push(n);
    for (const m of edges.get(n) ?? []) {
      if (state.get(m) === 1) problems.push(`import cycle: ${[...stack.slice(stack.indexOf(m)), m].join(" -> ")}`);
      else if (!state.has(m)) visit(m);
    }
    stack.pop();
    state.set(n, 2);
  };
  for (const n of edges.keys()) if (!state.has(n)) visit(n);
  return problems;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..");
  const problems = checkLayers(root);
  for (const p of problems) console.error(p);
  console.log(
    problems.length ? `${problems.length} layering problems` : "layers: no cycles, no deep imports, floors kept",
  );
  process.exit(problems.length ? 1 : 0);
}
