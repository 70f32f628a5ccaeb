import { defineConfig } from "vitest/config";
import { wgsl } from "./scripts/vite-wgsl.ts";

export default defineConfig({
  plugins: [wgsl()],
  test: {
    include: ["packages/**/*.test.ts", "apps/**/*.test.ts", "bench/**/*.test.ts"],
    // SwiftShader runs on the CPU; two files at once is what 2 cores can take.
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});
