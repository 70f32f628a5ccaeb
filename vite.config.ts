// Builds and serves apps/web; the engine runs in a module Web Worker. The app imports the built packages
// (webart, webart/engine, ...) as any project would; the embedded model comes inside them.
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  root: "apps/web",
  plugins: [react()],
  worker: { format: "es" },
  build: { outDir: "../../dist/web", emptyOutDir: true, target: "es2022" },
  server: { host: "127.0.0.1", port: 5173, strictPort: true },
  preview: { host: "127.0.0.1", port: 5173, strictPort: true },
});
