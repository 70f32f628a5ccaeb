import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { FsStore } from "./fs.ts";
import { dec, MemoryStore, runPrefix } from "./store.ts";

it.each(["fs", "memory"])("%s store: writes, lists, appends, removes and commits atomically", async (kind) => {
  const root = mkdtempSync(join(tmpdir(), "webart-store-"));
  const s = kind === "fs" ? await FsStore.open(root) : new MemoryStore();
  const run = runPrefix("proj", "agent-1");
  await s.write(`${run}/model.json`, '{"a":1}');
  await s.append(`${run}/history.jsonl`, "1\n");
  await s.append(`${run}/history.jsonl`, "2\n");
  await s.writeAtomic(
    {
      [`${run}/checkpoints/0001/adapter_config.json`]: "{}",
      [`${run}/checkpoints/0001/adapter_model.safetensors`]: new Uint8Array([1, 2]),
    },
    `${run}/latest`,
    "1",
  );
  expect(dec((await s.read(`${run}/history.jsonl`))!)).toBe("1\n2\n");
  expect(await s.list(`${run}/checkpoints`)).toEqual([
    `${run}/checkpoints/0001/adapter_config.json`,
    `${run}/checkpoints/0001/adapter_model.safetensors`,
  ]);
  expect(dec((await s.read(`${run}/latest`))!)).toBe("1");
  await s.remove(`${run}/checkpoints/0001`);
  expect(await s.list(`${run}/checkpoints`)).toEqual([]);
  expect(await s.read(`${run}/nothing`)).toBeNull();
  if (kind === "fs") {
    expect(readdirSync(join(root, run)).filter((f) => f.includes(".tmp-"))).toEqual([]);
    await expect(s.write("../escape", "x")).rejects.toThrow(/escapes/);
  }
});

it("rejects project and model names that could escape the run directory", () => {
  expect(() => runPrefix("..", "x")).toThrow(/project "\.\." is not allowed/);
  expect(() => runPrefix("p", "a/b")).toThrow(/model name "a\/b"/);
});
