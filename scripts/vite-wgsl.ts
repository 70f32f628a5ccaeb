// Vite/Vitest plugin, doing what the package build (scripts/build.mjs) does: `import code from "./forward.wgsl"`
// gives the file's text, and `import files from "virtual:webart-tiny"` (or webart-tools) an embedded model's files as bytes.
import type { Plugin } from "vite";
import { embeddedModelModule, embeddedModelName } from "./embedded-model.mjs";

export function wgsl(): Plugin {
  return {
    name: "webart-wgsl",
    resolveId(id) {
      return embeddedModelName(id) ? "\0" + id : null;
    },
    load(id) {
      const name = id.startsWith("\0") ? embeddedModelName(id.slice(1)) : null;
      return name ? embeddedModelModule(name) : null;
    },
    transform(code, id) {
      if (!id.endsWith(".wgsl")) return null;
      return { code: `export default ${JSON.stringify(code)};`, map: null };
    },
  };
}
