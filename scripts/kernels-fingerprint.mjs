// A hash of the kernels' sources (packages/shaders/src: WGSL and its TypeScript, tests aside). Start-up tuning's
// results are saved under it (a file in Node, IndexedDB in a browser) and reused only by a build whose kernels hash
// the same: the package build bakes it in as __WEBART_KERNELS__, and the tests' Vite config defines it too.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export function kernelsFingerprint() {
  const root = fileURLToPath(new URL("../packages/shaders/src/", import.meta.url));
  const h = createHash("sha256");
  const files = readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((f) => /\.(wgsl|ts)$/.test(f) && !f.endsWith(".test.ts"))
    .sort();
  for (const f of files)
    h.update(f)
      .update("\0")
      .update(readFileSync(root + f))
      .update("\0");
  return h.digest("hex").slice(0, 16);
}
