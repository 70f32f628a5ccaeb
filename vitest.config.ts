import { defaultServerConditions } from "vite";
import { defineConfig } from "vitest/config";
import { kernelsFingerprint } from "./scripts/kernels-fingerprint.mjs";
import { wgsl } from "./scripts/vite-wgsl.ts";

// Tests run the packages' sources: the "webart-source" export condition points each package at src/ (apps and
// outside projects get dist/, the built JavaScript).
const conditions = ["webart-source", ...defaultServerConditions];

export default defineConfig({
  plugins: [wgsl()],
  // As the package build does: the kernels' fingerprint, under which start-up tuning is saved.
  define: { __WEBART_KERNELS__: JSON.stringify(kernelsFingerprint()) },
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
    // Each load measures its own start-up tuning (what the tests check); tune-cache.test names its own files.
    env: { WEBART_TUNING_CACHE: "off" },
  },
});
