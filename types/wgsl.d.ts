// WGSL sources are imported as strings: by the package build (esbuild, scripts/build.mjs), the Vite plugin (scripts/vite-wgsl.ts) and, for the benchmarks' own kernels, the Node loader in scripts/wgsl-loader.mjs.
declare module "*.wgsl" {
  const code: string;
  export default code;
}

// The embedded model's folder (models/webart-tiny) as bytes per file name, made by the package build and by the
// Vite plugin in scripts/vite-wgsl.ts.
declare module "virtual:webart-tiny" {
  const files: Record<string, Uint8Array>;
  export default files;
}

declare module "virtual:webart-tools" {
  const files: Record<string, Uint8Array>;
  export default files;
}
