// The official Python `openai` package against `webart serve` over real HTTP (127.0.0.1, a free port) on the
// embedded model: packages/webart/test/python/openai_sdk.py asserts in Python (chat, streaming with logprobs,
// tools with tool_choice required, json_schema through a pydantic model, n=2, 404 and 400 errors) and reports
// one JSON line per check. Skipped, saying why, where `python3 -c "import openai"` fails (CI without it).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type RunningServer } from "./server.ts";

const ROOT = join(import.meta.dirname, "../../../../..");
const SCRIPT = join(ROOT, "packages/webart/test/python/openai_sdk.py");
const probe = spawnSync("python3", ["-c", "import openai, pydantic"], { encoding: "utf8" });
const missing =
  probe.status === 0
    ? null
    : `python3 cannot import openai and pydantic (${(probe.error?.message ?? probe.stderr).trim().split("\n").pop()})`;
if (missing) console.log(`SKIPPED python-sdk.test.ts: ${missing}; install them with: pip install openai`);

describe.skipIf(missing !== null)("the Python openai package against webart serve", () => {
  let srv: RunningServer;
  beforeAll(async () => {
    const runs = mkdtempSync(join(tmpdir(), "webart-python-sdk-"));
    srv = await startServer({ model: join(ROOT, "models/webart-tiny"), port: 0, runs, kvSlots: 8, maxContext: 1024 });
  });
  afterAll(() => srv?.close());

  it("passes every check of openai_sdk.py", async () => {
    const child = spawn("python3", [SCRIPT, `${srv.url}/v1`, srv.name], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    const reports = out
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { check: string; ok: boolean; error?: string });
    const failures = reports.filter((r) => !r.ok).map((r) => `${r.check}:\n${r.error}`);
    expect(failures, err).toEqual([]);
    expect(reports.map((r) => r.check)).toEqual([
      "check_chat",
      "check_stream_logprobs",
      "check_tools_required",
      "check_json_schema",
      "check_guided_choice",
      "check_n",
      "check_errors",
    ]);
    expect(code, err).toBe(0);
  }, 300_000);
});
