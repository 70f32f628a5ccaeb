// Builds and serves apps/web; the engine runs in a module Web Worker. The app imports the built packages
// (webart, webart/engine, ...) as any project would; the embedded model comes inside them.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

/** A hash of the kernels' sources (WGSL and their TypeScript, tests aside): start-up tuning results saved in the
 * browser are reused only by a build whose kernels hash the same. */
function kernelsFingerprint(): string {
  const root = fileURLToPath(new URL("./packages/shaders/src/", import.meta.url));
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

export default defineConfig({
  root: "apps/web",
  define: { __WEBART_KERNELS__: JSON.stringify(kernelsFingerprint()) },
  plugins: [react()],
  worker: { format: "es" },
  build: { outDir: "../../dist/web", emptyOutDir: true, target: "es2022" },
  server: { host: "127.0.0.1", port: 5173, strictPort: true },
  preview: { host: "127.0.0.1", port: 5173, strictPort: true },
});
