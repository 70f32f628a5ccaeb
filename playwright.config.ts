// End-to-end tests: the production build served on 127.0.0.1, in Debian's Chromium with WebGPU on
// SwiftShader (flags from DESIGN.md). Browsers are never downloaded.
import { defineConfig } from "@playwright/test";

// E2E_PORT: another port when 4173 is taken (e.g. two worktrees testing at once).
const PORT = Number(process.env.E2E_PORT ?? 4173);
export const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--enable-unsafe-webgpu",
  "--enable-features=Vulkan",
  "--use-vulkan=swiftshader",
  "--use-webgpu-adapter=swiftshader",
  "--disable-vulkan-surface",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
];

export default defineConfig({
  testDir: "e2e",
  outputDir: "test-results",
  timeout: 180_000,
  // CI's 2 shared cores: a file whose test fails runs once more from its start (serial files rerun together); a
  // failure on the second try fails the run.
  retries: process.env.CI ? 1 : 0,
  workers: 1,
  reporter: process.env.CI ? [["list"]] : [["list"]],
  use: {
    baseURL: `http://127.0.0.1:${PORT}`,
    browserName: "chromium",
    launchOptions: { executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium", args: CHROMIUM_ARGS },
    viewport: { width: 1280, height: 800 },
    screenshot: "only-on-failure",
  },
  webServer: {
    command: `npx vite preview --port ${PORT} --strictPort`,
    url: `http://127.0.0.1:${PORT}`,
    reuseExistingServer: false,
    timeout: 60_000,
  },
});
