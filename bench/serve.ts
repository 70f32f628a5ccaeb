// Serving throughput: `webart serve` on the embedded model in its own process, driven over HTTP at
// concurrency 1, 8 and 32; requests/s and completion tokens/s, with the ratio to concurrency 1 (same run).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { BenchResult, Suite } from "./harness.ts";

const ROOT = join(import.meta.dirname, "..");
const LEVELS = [1, 8, 32];

interface Served {
  url: string;
  proc: ChildProcess;
}

async function startServe(kvSlots: number): Promise<Served> {
  const runs = mkdtempSync(join(tmpdir(), "webart-bench-serve-"));
  const proc = spawn(
    process.execPath,
    [
      "packages/webart/bin/webart.js",
      "serve",
      "--port",
      "0",
      "--runs",
      runs,
      "--kv-slots",
      String(kvSlots),
      "--max-context",
      "256",
    ],
    { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (c) => {
      out += c;
      const m = /(http:\/\/\S+)\/v1 serving/.exec(out);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`webart serve exited (${code}) before listening:\n${out}`)));
  });
  return { url, proc };
}

interface Completion {
  choices: { finish_reason: string; token_ids?: number[] }[];
  usage: { completion_tokens: number };
}

/** One chat request; the answer is checked (ids present, usage matching them) before it counts. */
async function chat(url: string, i: number, maxTokens: number): Promise<number> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "webart-tiny",
      messages: [{ role: "user", content: `Game ${i}. Your move?` }],
      max_tokens: maxTokens,
      temperature: 1,
      seed: i,
    }),
  });
  if (!r.ok) throw new Error(`bench serve: request ${i}: HTTP ${r.status} ${await r.text()}`);
  const j = (await r.json()) as Completion;
  const ids = j.choices[0]?.token_ids;
  if (!ids || ids.length === 0 || ids.length > maxTokens || ids.length !== j.usage.completion_tokens) {
    throw new Error(`bench serve: request ${i}: malformed answer ${JSON.stringify(j).slice(0, 300)}`);
  }
  return ids.length;
}

/** `total` requests with at most `concurrency` in flight; wall seconds and completion tokens. */
async function wave(
  url: string,
  concurrency: number,
  total: number,
  maxTokens: number,
  first: number,
): Promise<{ seconds: number; tokens: number }> {
  let next = 0;
  let tokens = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const n = await chat(url, first + next++, maxTokens); // not `tokens += await`: that reads tokens before awaiting
        tokens += n;
      }
    }),
  );
  return { seconds: (performance.now() - t0) / 1000, tokens };
}

export const serveSuite: Suite = async (ctx) => {
  const maxTokens = ctx.quick ? 4 : 16;
  const s = await startServe(Math.max(...LEVELS));
  const out: BenchResult[] = [];
  try {
    await wave(s.url, 4, 4, maxTokens, 0); // warm-up: pipelines compiled, buffers pooled
    let base: { rps: number; tps: number } | undefined;
    for (const c of LEVELS) {
      const total = ctx.quick ? c : Math.max(8, 2 * c);
      const w = await wave(s.url, c, total, maxTokens, 1000 * c);
      const rps = total / w.seconds;
      const tps = w.tokens / w.seconds;
      base ??= { rps, tps };
      ctx.log(`concurrency ${c}: ${total} requests in ${w.seconds.toFixed(2)} s, ${w.tokens} tokens`);
      const vs = (id: string, v: number, b: number) => (c === 1 ? {} : { vs: { id, ratio: v / b } });
      out.push({
        id: `serve.c${c}.requests_per_s`,
        value: rps,
        unit: "req/s",
        ...vs("serve.c1.requests_per_s", rps, base.rps),
        note: `${total} requests, max_tokens ${maxTokens}`,
      });
      out.push({
        id: `serve.c${c}.tokens_per_s`,
        value: tps,
        unit: "tok/s",
        ...vs("serve.c1.tokens_per_s", tps, base.tps),
      });
    }
  } finally {
    const exited = new Promise((r) => s.proc.once("exit", r));
    s.proc.kill("SIGTERM");
    await exited;
  }
  return out;
};
