#!/usr/bin/env node
// `npm run pack`: builds the packages and packs each with `npm pack` into dist/packages/ (or the folder given),
// printing what each tarball weighs. Install them elsewhere with `npm install /path/to/dist/packages/*.tgz`.
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { buildAll, PACKAGES } from "./build.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Packs every package into `dest`; returns name, file and sizes (bytes) of each tarball. */
export function packAll(dest) {
  mkdirSync(dest, { recursive: true });
  return PACKAGES.map((p) => {
    const r = spawnSync("npm", ["pack", join(root, "packages", p), "--pack-destination", dest, "--json"], {
      cwd: root,
      encoding: "utf8",
      env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k))),
    });
    if (r.status !== 0) throw new Error(`npm pack packages/${p} failed:\n${r.stderr}`);
    const [info] = JSON.parse(r.stdout.slice(r.stdout.indexOf("[")));
    return {
      name: info.name,
      file: join(dest, info.filename),
      packed: info.size,
      unpacked: info.unpackedSize,
      files: info.entryCount,
    };
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dest = resolve(process.argv[2] ?? join(root, "dist", "packages"));
  await buildAll();
  for (const t of packAll(dest))
    console.log(
      `${t.name.padEnd(16)} ${(t.packed / 1024).toFixed(0).padStart(6)} KiB packed ${(t.unpacked / 1024).toFixed(0).padStart(6)} KiB unpacked  ${t.file}`,
    );
  console.log(`\ninstall in your project: npm install ${join(dest, "*.tgz")}`);
}
