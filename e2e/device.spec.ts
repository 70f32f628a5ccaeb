import { expect, test } from "@playwright/test";

test("the built page gets a WebGPU device inside the engine's Web Worker and shows it", async ({ page }) => {
  const problems: string[] = [];
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto("/");
  await expect(page.getByTestId("device-name")).toContainText(/swiftshader|\w+/i, { timeout: 60_000 });
  await expect(page.getByTestId("engine-context")).toHaveText("a Web Worker");
  const name = await page.getByTestId("device-name").textContent();
  expect(name?.trim().length).toBeGreaterThan(3);
  await page.screenshot({ path: "test-results/screens/device.png", fullPage: true });
  expect(problems).toEqual([]);
});
