// The files of models/webart-tiny (made by `npm run pretrain`), inlined by the build: the package build's
// esbuild plugin and the Vite plugin (scripts/vite-wgsl.ts) both turn this virtual module into the folder's
// files as bytes.
import files from "virtual:webart-tiny";

export const EMBEDDED_FILES: Record<string, Uint8Array> = files;
