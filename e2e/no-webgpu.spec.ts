// Without WebGPU the app says so, and what to do, instead of failing silently; nothing can start.
import { expect, test } from "@playwright/test";
import { CHROMIUM_ARGS } from "../playwright.config.ts";

test.use({
  launchOptions: {
    executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
    args: [...CHROMIUM_ARGS.filter((a) => a !== "--enable-unsafe-webgpu"), "--disable-features=WebGPU"],
  },
});

test("a browser without WebGPU gets a clear message and Start stays disabled", async ({ page }) => {
  await page.goto("/");
  const banner = page.getByTestId("banner-webgpu-missing");
  await expect(banner).toContainText("WebGPU is not available", { timeout: 60_000 });
  await expect(banner).toContainText("use a recent Chrome or Edge");
  await expect(page.getByRole("button", { name: "Start" })).toBeDisabled();
  await page.screenshot({ path: "test-results/screens/no-webgpu.png", fullPage: true });
});
