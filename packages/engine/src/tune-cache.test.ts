// Start-up tuning kept in a file between processes: a second device (as a second process gets) loading the same
// model reads every choice back and times nothing; other kernels, other devices and a broken file are handled.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it, vi } from "vitest";
import { createDevice, type Gpu } from "@webart/gpu";
import { deviceKey, KERNELS_FINGERPRINT, tuneTable } from "@webart/shaders";
import { Engine } from "./engine.ts";
import { EMBEDDED_MODEL } from "./model/embedded.ts";
import {
  defaultTuneCache,
  fileTuneCache,
  restoreTuning,
  saveTuning,
  startupTuningLine,
  type SavedTuning,
} from "./tune-cache.ts";

const dir = mkdtempSync(join(tmpdir(), "webart-tune-"));
const devices: Gpu[] = [];
afterAll(() => {
  for (const g of devices) g.destroy();
  rmSync(dir, { recursive: true, force: true });
});
const fresh = async () => {
  const g = await createDevice();
  devices.push(g);
  return g;
};
const readSaved = (path: string) => JSON.parse(readFileSync(path, "utf8")) as SavedTuning;
const opts = { kvSlots: 2, maxContext: 256 };

it("the tests know their kernels' fingerprint, as the package build does", () => {
  expect(KERNELS_FINGERPRINT).toMatch(/^[0-9a-f]{16}$/);
});

it("a load saves what it measured; a load on another device object with the same kernels reads it all back and times nothing", async () => {
  const path = join(dir, "nested", "tuning.json");
  const first = await Engine.load(EMBEDDED_MODEL, { ...opts, gpu: await fresh(), tuneCache: fileTuneCache(path) });
  const measured = tuneTable(first.gpu);
  await first.close();
  expect(first.startupTuning).toMatchObject({ restored: 0, measured: Object.keys(measured).length, cache: path });
  expect(startupTuningLine(first.startupTuning)).toMatch(
    /^start-up tuning: \d+ kernel choices timed in [\d.]+ s; kept in /,
  );
  const saved = readSaved(path);
  expect(saved.kernels).toBe(KERNELS_FINGERPRINT);
  expect(saved.build).toBe(first.gpu.kind.build);
  expect(saved.table).toEqual(measured);
  // The calibration (is this device a GPU?) is among them, so the next load times nothing at all.
  expect(Object.keys(saved.table)).toContain(`${deviceKey(first.gpu)}|calibration`);
  expect(Object.keys(saved.table).length).toBeGreaterThan(10);

  const before = readFileSync(path, "utf8");
  const second = await Engine.load(EMBEDDED_MODEL, { ...opts, gpu: await fresh(), tuneCache: fileTuneCache(path) });
  try {
    expect(second.startupTuning).toMatchObject({ restored: Object.keys(measured).length, measured: 0, cache: path });
    expect(startupTuningLine(second.startupTuning)).toMatch(/^start-up tuning: \d+ read back in [\d.]+ s from /);
    // Every choice (and its timings) is the saved one: a timing taken again would differ.
    expect(tuneTable(second.gpu)).toEqual(saved.table);
    expect(readFileSync(path, "utf8")).toBe(before); // nothing new, nothing written
    // A third load on that device finds every choice there already.
    const third = await Engine.load(EMBEDDED_MODEL, { ...opts, gpu: second.gpu, tuneCache: fileTuneCache(path) });
    await third.close();
    expect(third.startupTuning).toMatchObject({ ran: true, restored: 0, measured: 0 });
    expect(startupTuningLine(third.startupTuning)).toMatch(/every choice made by an earlier load on this device/);
    // The model runs what was read back.
    const r = await second.openaiClient().chat.completions.create({
      model: second.name,
      messages: [{ role: "user", content: "Your move?" }],
      max_tokens: 4,
      temperature: 0,
    });
    expect(r.choices[0].message.content?.length).toBeGreaterThan(0);
  } finally {
    await second.close();
  }
});

it("a table saved under other kernels is not used and is replaced; another device's entries are kept", async () => {
  const gpu = await fresh();
  const path = join(dir, "other.json");
  const mine = `${deviceKey(gpu)}|matmul.f32@64`;
  const theirs = "Some GPU|ampere|dawn|robust=false|matmul.f32@64";
  writeFileSync(path, JSON.stringify({ kernels: "0000000000000000", table: { [mine]: { winner: "x", ms: {} } } }));
  expect(await restoreTuning(gpu, fileTuneCache(path))).toBe(0);
  // Nor one compiled by another build: a browser (its user agent), another Dawn for Node, or one that names none.
  expect(gpu.kind.build).toMatch(/^webgpu \d+\.\d+\.\d+/);
  for (const build of ["Mozilla/5.0", "webgpu 0.0.1", undefined]) {
    const table = { [mine]: { winner: "x", ms: {} } };
    writeFileSync(path, JSON.stringify({ kernels: KERNELS_FINGERPRINT, build, table }));
    expect(await restoreTuning(gpu, fileTuneCache(path))).toBe(0);
  }
  expect(gpu.tuning.size).toBe(0);

  gpu.tuning.set("matmul.f32@64", { winner: "tiled", ms: { tiled: 1 } });
  await saveTuning(gpu, fileTuneCache(path));
  expect(readSaved(path)).toEqual({
    kernels: KERNELS_FINGERPRINT,
    build: gpu.kind.build,
    table: { [mine]: { winner: "tiled", ms: { tiled: 1 } } },
  });

  // Another device's entry under these kernels stays when this device saves again; only this device's are read.
  const s = readSaved(path);
  s.table[theirs] = { winner: "coop", ms: {} };
  writeFileSync(path, JSON.stringify(s));
  gpu.tuning.set("rmsnorm@64", { winner: "row", ms: {} });
  await saveTuning(gpu, fileTuneCache(path));
  expect(Object.keys(readSaved(path).table).sort()).toEqual([`${deviceKey(gpu)}|rmsnorm@64`, mine, theirs].sort());
  const other = await fresh();
  expect(await restoreTuning(other, fileTuneCache(path))).toBe(2);
  expect(other.tuning.get("matmul.f32@64")?.winner).toBe("tiled");
  // What a device already measured is not replaced by what was saved.
  const third = await fresh();
  third.tuning.set("rmsnorm@64", { winner: "col", ms: {} });
  expect(await restoreTuning(third, fileTuneCache(path))).toBe(1);
  expect(third.tuning.get("rmsnorm@64")?.winner).toBe("col");
});

it("a broken cache file is reported, never fails the caller, and the next save replaces it", async () => {
  const gpu = await fresh();
  const path = join(dir, "broken.json");
  const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
  try {
    for (const text of ["{ not json", JSON.stringify({ kernels: 3, table: [] })]) {
      writeFileSync(path, text);
      expect(await restoreTuning(gpu, fileTuneCache(path))).toBe(0);
      expect(String(warn.mock.calls.at(-1)?.[0])).toContain(`saved kernel tuning in ${path} not loaded`);
    }
    gpu.tuning.set("matmul.f32@64", { winner: "tiled", ms: {} });
    await saveTuning(gpu, fileTuneCache(path));
    expect(readSaved(path).kernels).toBe(KERNELS_FINGERPRINT);
    // A cache that cannot be written (its folder is a file) is reported, and the caller goes on.
    await saveTuning(gpu, fileTuneCache(join(path, "tuning.json")));
    expect(String(warn.mock.calls.at(-1)?.[0])).toContain("kernel tuning not saved to");
  } finally {
    warn.mockRestore();
  }
});

it("the default cache: WEBART_TUNING_CACHE names the file or turns it off, else the user's cache folder", async () => {
  const saved = { set: process.env.WEBART_TUNING_CACHE, xdg: process.env.XDG_CACHE_HOME };
  try {
    process.env.WEBART_TUNING_CACHE = "off"; // as the tests run
    expect(await defaultTuneCache()).toBeUndefined();
    process.env.WEBART_TUNING_CACHE = join(dir, "mine.json");
    expect((await defaultTuneCache())?.where).toBe(join(dir, "mine.json"));
    delete process.env.WEBART_TUNING_CACHE;
    process.env.XDG_CACHE_HOME = join(dir, "xdg");
    expect((await defaultTuneCache())?.where).toBe(join(dir, "xdg", "webart", "tuning.json"));
  } finally {
    for (const [k, v] of [
      ["WEBART_TUNING_CACHE", saved.set],
      ["XDG_CACHE_HOME", saved.xdg],
    ] as const)
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  }
  // Engine.load with tuneCache: false, or without tuning, keeps nothing.
  const e = await Engine.load(EMBEDDED_MODEL, { ...opts, tune: false, tuneCache: fileTuneCache(join(dir, "no.json")) });
  await e.close();
  expect(e.startupTuning).toEqual({ ran: false, restored: 0, measured: 0, ms: 0 });
  expect(startupTuningLine(e.startupTuning)).toBe("start-up tuning: off (EngineOptions.tune: false)");
});
