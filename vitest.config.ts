import { defaultServerConditions } from "vite";
import { defineConfig } from "vitest/config";
import { wgsl } from "./scripts/vite-wgsl.ts";

// Tests run the packages' sources: the "webart-source" export condition points each package at src/ (apps and
// outside projects get dist/, the built JavaScript).
const conditions = ["webart-source", ...defaultServerConditions];

export default defineConfig({
  plugins: [wgsl()],
  resolve: { conditions },
  ssr: { resolve: { conditions } },
  test: {
    include: ["packages/**/*.test.ts", "apps/**/*.test.ts", "bench/**/*.test.ts", "scripts/**/*.test.ts"],
    // SwiftShader runs on the CPU; two files at once is what 2 cores can take.
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
    globalSetup: ["scripts/vitest-setup.ts"],
  },
});
