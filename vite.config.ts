// Builds and serves apps/web; the engine runs in a module Web Worker. The embedded model (models/webart-tiny)
// is served at /models/webart-tiny/ in dev (with HTTP Range, as the engine reads weights by ranges) and copied
// into the build beside the app.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineConfig, type Plugin } from "vite";
import react from "@vitejs/plugin-react";
import { wgsl } from "./scripts/vite-wgsl.ts";

const MODEL = "models/webart-tiny";

const notFound = (res: import("node:http").ServerResponse) => {
  res.statusCode = 404;
  res.end("not found");
};

function embeddedModel(): Plugin {
  const dir = fileURLToPath(new URL(`./${MODEL}/`, import.meta.url));
  const files = () => readdirSync(dir).filter((f) => statSync(dir + f).isFile());
  return {
    name: "webart-embedded-model",
    configureServer(server) {
      server.middlewares.use(`/${MODEL}/`, (req, res) => {
        const name = decodeURIComponent((req.url ?? "").split("?")[0].replace(/^\//, ""));
        if (!files().includes(name)) return notFound(res);
        const body = readFileSync(dir + name);
        const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
        res.setHeader("Accept-Ranges", "bytes");
        if (!m) return res.end(body);
        const start = Number(m[1]);
        const end = Math.min(m[2] ? Number(m[2]) : body.length - 1, body.length - 1);
        res.statusCode = 206;
        res.setHeader("Content-Range", `bytes ${start}-${end}/${body.length}`);
        res.end(body.subarray(start, end + 1));
      });
    },
    // Preview serves the build; a file the model does not have must be a 404, not the SPA's index.html.
    configurePreviewServer(server) {
      server.middlewares.use(`/${MODEL}/`, (req, res, next) => {
        const name = decodeURIComponent((req.url ?? "").split("?")[0].replace(/^\//, ""));
        return files().includes(name) ? next() : notFound(res);
      });
    },
    generateBundle() {
      for (const f of files())
        this.emitFile({ type: "asset", fileName: `${MODEL}/${f}`, source: readFileSync(dir + f) });
    },
  };
}

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
  plugins: [react(), wgsl(), embeddedModel()],
  worker: { format: "es", plugins: () => [wgsl()] },
  build: { outDir: "../../dist/web", emptyOutDir: true, target: "es2022" },
  server: { host: "127.0.0.1", port: 5173, strictPort: true },
  preview: { host: "127.0.0.1", port: 5173, strictPort: true },
});
