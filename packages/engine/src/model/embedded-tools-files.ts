// The files of models/webart-tools (the email agent's model, made by `npm run pretrain -- --task email`), inlined
// by the build as embedded-files.ts inlines webart-tiny's.
import files from "virtual:webart-tools";

export const EMBEDDED_FILES: Record<string, Uint8Array> = files;
