// The packages' layering (scripts/layers.mjs): the repo passes, and a made-up workspace with a cycle, a deep
// import, an undeclared dependency, a reach into another package's files and an upward import fails on each.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { checkLayers, importsOf } from "./layers.mjs";

const ROOT = join(import.meta.dirname, "..");
const tmp = mkdtempSync(join(tmpdir(), "webart-layers-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function workspace(files: Record<string, string | object>): string {
  const root = mkdtempSync(join(tmp, "ws-"));
  for (const [path, body] of Object.entries({ "package.json": { workspaces: ["packages/*"] }, ...files })) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), typeof body === "string" ? body : JSON.stringify(body));
  }
  return root;
}
const pkg = (name: string, deps: Record<string, string> = {}) => ({
  name,
  exports: { ".": "./src/index.ts" },
  dependencies: deps,
});

describe("package layers", () => {
  it("this repo: no cycles, no deep imports, every import declared, floors kept", () => {
    expect(checkLayers(ROOT)).toEqual([]);
  });

  it("finds import specifiers, static, dynamic and re-exports, but not in comments", () => {
    const code = `import a from "x";\nimport type { B } from '@s/y';\nexport * from "./z.ts";\nconst m = await import("w");\n// import "commented";\n/* import "block" */`;
    expect(importsOf(code)).toEqual(["x", "@s/y", "./z.ts", "w"]);
  });

  it("reports a cycle, a deep import, an undeclared dependency, a reach into another package and an upward import", () => {
    const root = workspace({
      "packages/gpu/package.json": pkg("@webart/gpu", { "@webart/engine": "0.1.0" }),
      "packages/gpu/src/index.ts": `import { Engine } from "@webart/engine";\n`,
      "packages/engine/package.json": pkg("@webart/engine", { "@webart/gpu": "0.1.0" }),
      "packages/engine/src/index.ts": `import { x } from "@webart/gpu/src/device.ts";\nimport { y } from "../../gpu/src/index.ts";\nimport { r } from "@webart/ruler";\n`,
      "packages/ruler/package.json": pkg("@webart/ruler"),
      "packages/ruler/src/index.ts": `export const r = 1;\n`,
    });
    const problems = checkLayers(root).join("\n");
    expect(problems).toMatch(/import cycle: @webart\/\w+ -> @webart\/\w+ -> @webart\/\w+/);
    expect(problems).toMatch(/"@webart\/gpu\/src\/device\.ts" is a deep import/);
    expect(problems).toMatch(/imports @webart\/ruler, which @webart\/engine's package\.json does not declare/);
    expect(problems).toMatch(/"\.\.\/\.\.\/gpu\/src\/index\.ts" reaches into @webart\/gpu's files/);
    expect(problems).toMatch(/@webart\/gpu \(floor 0\) imports @webart\/engine \(floor 2\), not below it/);
  });
});
