// webart as a user installs it: the packages are packed with `npm pack` and installed from the tarballs into a new
// project outside the repo (its other dependencies come from the npm registry; the repo's node_modules are out of
// reach). There: (a) the `webart` command trains 2 steps; (b) a Node script with its own task warm-starts by
// supervised fine-tuning and trains 2 GRPO steps with TrainableModel + LocalBackend; (c) a strict TypeScript file
// type-checks against the shipped .d.ts; (d) a Vite app built there runs webart in a Web Worker in Chromium and
// answers a chat completion with the embedded model.
// Tarball sizes and the time of each part go to test-results/consumer.json.
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { expect, test } from "@playwright/test";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const version = (pkg: string) =>
  JSON.parse(readFileSync(join(ROOT, "node_modules", pkg, "package.json"), "utf8")).version as string;

test.describe.configure({ mode: "serial" });

let work = "";
let project = "";
const report: {
  tarballs: Record<string, { packed: number; unpacked: number; files: number }>;
  seconds: Record<string, number>;
} = {
  tarballs: {},
  seconds: {},
};

/** The environment of a user's shell: nothing of the npm process running these tests (its npm_* settings). */
const userEnv = () =>
  Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== "NODE_PATH" && k !== "INIT_CWD"),
  );

function sh(cmd: string, args: string[], cwd = project, timeout = 300_000): SpawnSyncReturns<string> {
  const r = spawnSync(cmd, args, { cwd, env: userEnv(), encoding: "utf8", timeout, maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`${cmd} ${args.join(" ")}: ${r.error.message}`);
  return r;
}
function ok(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0)
    throw new Error(
      `${what} exited ${r.status}\n--- stdout\n${r.stdout.slice(-4000)}\n--- stderr\n${r.stderr.slice(-4000)}`,
    );
  return r.stdout;
}
async function timed<T>(name: string, f: () => T | Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await f();
  } finally {
    report.seconds[name] = Math.round((Date.now() - t0) / 100) / 10;
  }
}

test.beforeAll(async () => {
  test.setTimeout(600_000);
  ok(sh(process.execPath, [join(ROOT, "scripts/build.mjs"), "--if-stale"], ROOT), "build");
  work = mkdtempSync(join(tmpdir(), "webart-consumer-"));
  const tgz = join(work, "tarballs");
  project = join(work, "my-agent");
  mkdirSync(tgz);
  mkdirSync(project);
  const tarballs = await timed("pack", async () => {
    const { packAll } = (await import(pathToFileURL(join(ROOT, "scripts/pack.mjs")).href)) as {
      packAll: (dest: string) => { name: string; file: string; packed: number; unpacked: number; files: number }[];
    };
    return packAll(tgz).map(
      (t) => ((report.tarballs[t.name] = { packed: t.packed, unpacked: t.unpacked, files: t.files }), t.file),
    );
  });
  writeFileSync(
    join(project, "package.json"),
    JSON.stringify({ name: "my-agent", private: true, type: "module" }, null, 2),
  );
  cpSync(join(ROOT, "e2e/consumer"), project, { recursive: true });
  await timed("install", () =>
    ok(
      sh("npm", [
        "install",
        "--no-audit",
        "--no-fund",
        "--prefer-offline",
        ...tarballs,
        `typescript@${version("typescript")}`,
        `vite@${version("vite")}`,
      ]),
      "npm install",
    ),
  );
  // Nothing resolves into the repo: every installed webart package is a copy inside the project.
  expect(existsSync(join(project, "node_modules/webart/dist/index.js"))).toBe(true);
  expect(existsSync(join(project, "node_modules/@webart/engine/src"))).toBe(false);
});

test.afterAll(() => {
  mkdirSync(join(ROOT, "test-results"), { recursive: true });
  writeFileSync(join(ROOT, "test-results/consumer.json"), JSON.stringify(report, null, 2) + "\n");
  console.log(`consumer check: ${JSON.stringify(report)}`);
  if (work) rmSync(work, { recursive: true, force: true });
});

test("(a) npx webart --help, then npx webart train --env tictactoe --steps 2 makes a checkpoint", async () => {
  test.setTimeout(600_000);
  const help = ok(sh("npx", ["--no", "--", "webart", "--help"]), "npx webart --help");
  for (const cmd of ["train", "eval", "serve", "info", "pretrain"]) expect(help).toContain(cmd);
  const out = await timed("a_train", () =>
    ok(
      sh("npx", ["--no", "--", "webart", "train", "--env", "tictactoe", "--steps", "2"], project, 540_000),
      "npx webart train",
    ),
  );
  expect(out).toMatch(/step 2: reward/);
  const run = join(project, ".art/tictactoe/models/agent");
  expect(existsSync(join(run, "checkpoints/0002/adapter_model.safetensors"))).toBe(true);
  expect(existsSync(join(run, "checkpoints/0002/adapter_config.json"))).toBe(true);
  // The installed command measures the embedded model on this device.
  const speed = ok(
    sh("npx", ["--no", "--", "webart", "info", "--speed", "--quick"], project, 120_000),
    "webart info --speed",
  );
  expect(speed).toMatch(/^decode b1: +[\d.]+ tokens\/s in runs of 8 steps/m);
});

test("(b) a Node ESM script with its own task: a supervised warm start, then 2 GRPO steps with TrainableModel + LocalBackend", async () => {
  test.setTimeout(300_000);
  const out = await timed("b_agent", () => ok(sh(process.execPath, ["agent.mjs"]), "node agent.mjs"));
  const result = JSON.parse(out.trim().split("\n").at(-1)!) as { step: number; rewards: number[][]; sftLoss: number };
  expect(result.step).toBe(3);
  expect(result.sftLoss).toBeGreaterThan(0);
  expect(result.rewards.flat()).toHaveLength(16);
  expect(
    existsSync(join(project, ".art/consumer/models/short-replies/checkpoints/0003/adapter_model.safetensors")),
  ).toBe(true);
});

test("(c) a strict TypeScript file type-checks against the shipped .d.ts (and a wrong one does not)", async () => {
  test.setTimeout(120_000);
  const r = await timed("c_tsc", () => sh("npx", ["--no", "--", "tsc", "-p", "."]));
  expect(r.stdout.trim()).toBe("");
  expect(r.status).toBe(0);
  // The check has teeth: a use of a name the API does not have fails.
  writeFileSync(
    join(project, "wrong.ts"),
    `import { TrainableModel } from "webart";\nnew TrainableModel({ name: "x", project: "p", baseModel: 42 });\n`,
  );
  writeFileSync(
    join(project, "tsconfig.wrong.json"),
    JSON.stringify({ extends: "./tsconfig.json", files: ["wrong.ts"] }),
  );
  const bad = sh("npx", ["--no", "--", "tsc", "-p", "tsconfig.wrong.json"]);
  expect(bad.status).not.toBe(0);
  expect(bad.stdout).toMatch(/wrong\.ts\(2,\d+\): error TS2322/);
});

test("(d) a Vite app built there runs webart in a Web Worker in Chromium: embedded model, one chat completion", async ({
  page,
}) => {
  test.setTimeout(300_000);
  await timed("d_vite_build", () =>
    ok(sh("npx", ["--no", "--", "vite", "build", "app", "--outDir", "../web", "--emptyOutDir"]), "vite build"),
  );
  const web = join(project, "web");
  const types: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };
  const server: Server = createServer((req, res) => {
    const path = join(web, decodeURIComponent((req.url ?? "/").split("?")[0]).replace(/\/$/, "/index.html"));
    if (!path.startsWith(web) || !existsSync(path)) return res.writeHead(404).end("not found");
    res.writeHead(200, { "content-type": types[extname(path)] ?? "application/octet-stream" }).end(readFileSync(path));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(e.message));
  try {
    const port = (server.address() as { port: number }).port;
    await timed("d_chromium", async () => {
      await page.goto(`http://127.0.0.1:${port}/`);
      await expect(page.locator("#out[data-state]")).toBeAttached({ timeout: 240_000 });
    });
    const result = JSON.parse((await page.locator("#out").textContent()) ?? "{}") as Record<string, unknown>;
    expect(result.error, String(result.error)).toBeUndefined();
    expect(result.model).toBe("webart-tiny");
    expect(typeof result.content).toBe("string");
    expect(result.tokens).toBeGreaterThan(0);
    expect(["stop", "length"]).toContain(result.finish);
    expect(problems).toEqual([]);
  } finally {
    server.close();
  }
});
