// Vite/Vitest plugin: `import code from "./forward.wgsl"` gives the file's text.
import type { Plugin } from "vite";

export function wgsl(): Plugin {
  return {
    name: "webart-wgsl",
    transform(code, id) {
      if (!id.endsWith(".wgsl")) return null;
      return { code: `export default ${JSON.stringify(code)};`, map: null };
    },
  };
}
