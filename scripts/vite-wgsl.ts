// Vite/Vitest plugin, doing what the package build (scripts/build.mjs) does: `import code from "./forward.wgsl"`
// gives the file's text, and `import files from "virtual:webart-tiny"` the embedded model's files as bytes.
import type { Plugin } from "vite";
import { embeddedModelModule } from "./embedded-model.mjs";

const EMBEDDED = "virtual:webart-tiny";

export function wgsl(): Plugin {
  return {
    name: "webart-wgsl",
    resolveId(id) {
      return id === EMBEDDED ? "\0" + EMBEDDED : null;
    },
    load(id) {
      return id === "\0" + EMBEDDED ? embeddedModelModule() : null;
    },
    transform(code, id) {
      if (!id.endsWith(".wgsl")) return null;
      return { code: `export default ${JSON.stringify(code)};`, map: null };
    },
  };
}
