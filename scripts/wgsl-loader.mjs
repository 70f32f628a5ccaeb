// Node module hook: `import code from "./forward.wgsl"` gives the file's text (as the Vite plugin does).
import { register } from "node:module";

register(
  "data:text/javascript," +
    encodeURIComponent(`
      import { readFile } from "node:fs/promises";
      export async function load(url, context, next) {
        if (url.endsWith(".wgsl")) {
          const text = await readFile(new URL(url), "utf8");
          return { format: "module", source: "export default " + JSON.stringify(text) + ";", shortCircuit: true };
        }
        return next(url, context);
      }
    `),
);
