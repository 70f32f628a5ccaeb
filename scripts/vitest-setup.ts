// Vitest global set-up: tests that start the `webart` command (the server, the CLI) run the built package, so
// it is rebuilt first when a source changed (a no-op otherwise).
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export default function setup(): void {
  execFileSync(process.execPath, [fileURLToPath(new URL("./build.mjs", import.meta.url)), "--if-stale"], {
    stdio: "inherit",
  });
}
