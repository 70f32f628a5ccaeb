// The embedded models ship inside the package: `baseModel: "webart-tiny"` (the default) or "webart-tools" (the
// email agent's) loads it from memory, with no files around, in Node and in the browser. Each one's bytes sit in a
// module of their own (about 2 MB once encoded), imported only when that model is asked for, so bundlers split
// them off.
import type { ModelFiles } from "../weights/files.ts";
import { memorySource } from "../weights/source.ts";

/** The name that stands for the embedded default model wherever a model source is taken. */
export const EMBEDDED_MODEL = "webart-tiny";

/** The email agent's embedded model: its own tokenizer (tool JSON and email text) and a 2048-token context. */
export const EMBEDDED_TOOLS_MODEL = "webart-tools";

const EMBEDDED: Record<string, () => Promise<{ EMBEDDED_FILES: Record<string, Uint8Array> }>> = {
  [EMBEDDED_MODEL]: () => import("./embedded-files.ts"),
  [EMBEDDED_TOOLS_MODEL]: () => import("./embedded-tools-files.ts"),
};

export const isEmbeddedModel = (name: string): boolean => Object.hasOwn(EMBEDDED, name);

/** An embedded model's files (config, tokenizer, weights) as a ModelFiles read from memory. */
export async function embeddedModelFiles(name: string = EMBEDDED_MODEL): Promise<ModelFiles> {
  const load = EMBEDDED[name];
  if (!load) throw new Error(`no embedded model "${name}" (${Object.keys(EMBEDDED).join(", ")})`);
  const { EMBEDDED_FILES } = await load();
  if (!EMBEDDED_FILES["model.safetensors"])
    throw new Error(
      `the embedded model "${name}" is not in this build: models/${name} held no weights when it was built ` +
        `(make them with npm run pretrain${name === EMBEDDED_TOOLS_MODEL ? " -- --task email" : ""}, then build again)`,
    );
  return {
    name,
    async open(file) {
      const bytes = EMBEDDED_FILES[file];
      return bytes ? memorySource(bytes, `${name}/${file}`) : null;
    },
  };
}
