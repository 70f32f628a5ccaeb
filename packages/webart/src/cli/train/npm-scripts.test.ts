// npm runs "pre<name>" before `npm run <name>`: `npm run train` must not start the 50-minute pretrain (which
// rewrites models/webart-tiny), while `npm run pretrain` itself still runs it.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../../../../..");
const npm = (args: string[]) => {
  const r = spawnSync("npm", args, { cwd: ROOT, encoding: "utf8", timeout: 120_000 });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

describe("npm scripts", () => {
  it("npm run train skips the pretrain hook; npm run pretrain runs pretrain.ts", () => {
    const train = npm(["run", "train", "--", "--help"]);
    expect(train.status).toBe(0);
    expect(train.out).toContain(`npm runs "pretrain" before "train" as a hook; skipped`);
    expect(train.out).toContain("usage: webart train");
    expect(train.out).not.toContain("[pretrain");

    // A bad flag makes pretrain.ts stop at its argument check, before any work.
    const pre = npm(["run", "pretrain", "--", "--no-such-flag"]);
    expect(pre.status).not.toBe(0);
    expect(pre.out).not.toContain("as a hook; skipped");
    expect(pre.out).toContain("--no-such-flag");
  });
});
