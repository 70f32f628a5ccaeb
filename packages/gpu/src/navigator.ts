// Finds a WebGPU implementation: the browser's (page or worker) or Dawn in Node
// (npm `webgpu`), falling back to SwiftShader's Vulkan ICD when Dawn finds no adapter.

const SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json";

export interface GpuApiOptions {
  /** Node only: Dawn's bounds checks on storage accesses. Browsers always keep them on. */
  robustness?: boolean;
  /** Node only: extra Dawn switches, e.g. "enable-dawn-features=dump_shaders". */
  dawnFlags?: string[];
}

export interface FoundAdapter {
  gpu: GPU;
  adapter: GPUAdapter;
  /** Human-readable notes on how the adapter was found (e.g. the SwiftShader fallback). */
  notes: string[];
  runtime: "browser" | "node";
  /** What compiles and runs the kernels: the browser's user agent, or Dawn for Node as "webgpu <its npm version>". */
  build: string;
}

export const isNode = (): boolean =>
  typeof process !== "undefined" && typeof process.versions?.node === "string" && !("document" in globalThis);

type DawnModule = { create: (flags: string[]) => GPU; globals: Record<string, unknown> };

let dawn: DawnModule | undefined;
const dawnInstances = new Map<string, GPU>();
let warnedIcd = false;

async function loadDawn(): Promise<DawnModule> {
  if (dawn) return dawn;
  const name = "webgpu"; // a variable, so browser bundlers leave this Node-only import alone
  try {
    dawn = (await import(/* @vite-ignore */ name)) as DawnModule;
  } catch (e) {
    throw new Error(
      `WebGPU: no navigator.gpu here and the npm package "webgpu" (Dawn for Node) failed to load: ${
        (e as Error).message
      }. Run \`npm install\` in the repository root.`,
      { cause: e },
    );
  }
  // GPUBufferUsage, GPUMapMode, GPUShaderStage... as globals, like in a browser.
  for (const [k, v] of Object.entries(dawn.globals)) {
    if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
  }
  return dawn;
}

/** The npm package "webgpu"'s version, as "webgpu 0.6.2" (just "webgpu" where its package.json cannot be read). */
async function dawnBuild(): Promise<string> {
  try {
    const name = "node:module";
    const { createRequire } = (await import(/* @vite-ignore */ name)) as typeof import("node:module");
    const pkg = createRequire(import.meta.url)("webgpu/package.json") as { version?: unknown };
    return typeof pkg.version === "string" ? `webgpu ${pkg.version}` : "webgpu";
  } catch {
    return "webgpu";
  }
}

function dawnFlags(opts: GpuApiOptions): string[] {
  // allow_unsafe_apis: timestamp queries without quantisation. disable_workgroup_init: Dawn zero-fills
  // workgroup memory otherwise, which costs seconds of pipeline creation on SwiftShader; the engine's
  // kernels write workgroup memory before reading it (browsers keep the zero-fill, so both are tested).
  // vulkan_enable_f16_on_nvidia: Dawn hides shader-f16 on NVIDIA's Vulkan driver unless asked; the coop matmul
  // (tensor cores) needs it, and its output is checked like every kernel's.
  const enable = ["allow_unsafe_apis", "vulkan_enable_f16_on_nvidia"];
  if (opts.robustness === false) enable.push("disable_robustness", "disable_workgroup_init");
  return [`enable-dawn-features=${enable.join(",")}`, ...(opts.dawnFlags ?? [])];
}

function dawnInstance(mod: DawnModule, flags: string[]): GPU {
  const key = flags.join(" ");
  let gpu = dawnInstances.get(key);
  if (!gpu) {
    gpu = mod.create(flags);
    dawnInstances.set(key, gpu);
  }
  return gpu;
}

async function fileExists(path: string): Promise<boolean> {
  const name = "node:fs";
  const fs = (await import(/* @vite-ignore */ name)) as typeof import("node:fs");
  return fs.existsSync(path);
}

/** SwiftShader complains on stderr at every instance creation when XDG_RUNTIME_DIR is unset
 *  (headless machines, CI); give it a private empty one. */
async function quietXdg(): Promise<void> {
  if (process.platform !== "linux" || process.env.XDG_RUNTIME_DIR) return;
  const fsName = "node:fs";
  const osName = "node:os";
  const fs = (await import(/* @vite-ignore */ fsName)) as typeof import("node:fs");
  const os = (await import(/* @vite-ignore */ osName)) as typeof import("node:os");
  const dir = `${os.tmpdir()}/webart-xdg-${process.getuid?.() ?? "user"}`;
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    process.env.XDG_RUNTIME_DIR = dir;
  } catch {
    // Only noise is at stake.
  }
}

/** Returns an adapter, or throws an error that says what was tried and what to install. */
export async function findAdapter(
  opts: GpuApiOptions & { powerPreference?: GPUPowerPreference } = {},
): Promise<FoundAdapter> {
  const req: GPURequestAdapterOptions = { powerPreference: opts.powerPreference ?? "high-performance" };
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (!isNode()) {
    if (!nav?.gpu) {
      throw new Error(
        "WebGPU is not available in this browser (navigator.gpu is missing). Use a recent Chrome, Edge or " +
          "Firefox over https:// or http://localhost, and check that WebGPU is not disabled (chrome://gpu).",
      );
    }
    const adapter = await nav.gpu.requestAdapter(req);
    if (!adapter) {
      throw new Error(
        "WebGPU: navigator.gpu.requestAdapter() returned no adapter. The GPU may be blocklisted; see chrome://gpu, " +
          "or start Chromium with --enable-unsafe-webgpu.",
      );
    }
    return { gpu: nav.gpu, adapter, notes: [], runtime: "browser", build: navigator.userAgent };
  }

  const mod = await loadDawn();
  await quietXdg();
  const flags = dawnFlags(opts);
  const notes: string[] = [];
  let gpu = dawnInstance(mod, flags);
  let adapter = await gpu.requestAdapter(req);
  const tried = [`Dawn with VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES ?? "(unset)"}`];
  if (!adapter && process.platform === "linux" && process.env.VK_ICD_FILENAMES !== SWIFTSHADER_ICD) {
    if (await fileExists(SWIFTSHADER_ICD)) {
      // The Vulkan loader reads this when Dawn creates an instance, so a fresh instance sees it.
      process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
      dawnInstances.clear();
      gpu = dawnInstance(mod, flags);
      adapter = await gpu.requestAdapter(req);
      tried.push(`Dawn with VK_ICD_FILENAMES=${SWIFTSHADER_ICD}`);
      if (adapter) {
        const note = `webart: no GPU adapter found; using SwiftShader (CPU Vulkan) via VK_ICD_FILENAMES=${SWIFTSHADER_ICD}`;
        notes.push(note);
        if (!warnedIcd) {
          warnedIcd = true;
          console.warn(note);
        }
      }
    } else {
      tried.push(`SwiftShader ICD (${SWIFTSHADER_ICD}: not found)`);
    }
  }
  if (!adapter) {
    throw new Error(
      `WebGPU: no adapter found in Node. Tried: ${tried.join("; ")}. ` +
        (process.platform === "linux"
          ? "For a CPU fallback install Debian's SwiftShader: `sudo apt-get install -y chromium libvulkan1` " +
            "(or run `npm test` / `npm start` as root, which installs it)."
          : "Install a GPU driver with Vulkan, Metal or D3D12 support."),
    );
  }
  return { gpu, adapter, notes, runtime: "node", build: await dawnBuild() };
}

/** Drops Node's Dawn instances so the process can exit (Dawn keeps the event loop alive). */
export function releaseDawn(): void {
  dawnInstances.clear();
}
