// WGSL sources are imported as strings (vite plugin in vite.config.ts, Node loader in scripts/wgsl-loader.mjs).
declare module "*.wgsl" {
  const code: string;
  export default code;
}
