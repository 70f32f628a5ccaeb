// Builds and serves apps/web; the engine runs in a module Web Worker.
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";
import { wgsl } from "./scripts/vite-wgsl.ts";

export default defineConfig({
  root: "apps/web",
  plugins: [react(), wgsl()],
  worker: { format: "es", plugins: () => [wgsl()] },
  build: { outDir: "../../dist/web", emptyOutDir: true, target: "es2022" },
  server: { host: "127.0.0.1", port: 5173, strictPort: true },
  preview: { host: "127.0.0.1", port: 5173, strictPort: true },
});
