// The embedded default model ships inside the package: `baseModel: "webart-tiny"` loads it from memory, with
// no files around, in Node and in the browser. Its bytes sit in a module of their own (about 2 MB once
// encoded), imported only when the model is asked for, so bundlers split it off.
import type { ModelFiles } from "../weights/files.ts";
import { memorySource } from "../weights/source.ts";

/** The name that stands for the embedded model wherever a model source is taken. */
export const EMBEDDED_MODEL = "webart-tiny";

/** The embedded model's files (config, tokenizer, weights) as a ModelFiles read from memory. */
export async function embeddedModelFiles(): Promise<ModelFiles> {
  const { EMBEDDED_FILES } = await import("./embedded-files.ts");
  const name = EMBEDDED_MODEL;
  return {
    name,
    async open(file) {
      const bytes = EMBEDDED_FILES[file];
      return bytes ? memorySource(bytes, `${name}/${file}`) : null;
    },
  };
}
