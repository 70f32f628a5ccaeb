// The tensor-core matmul: same contract and bindings as the other variants (C = alpha·op(A)·op(B) (+ bias) (+ C)),
// its products on the device's subgroup matrices (Dawn's chromium_experimental_subgroup_matrix: Vulkan cooperative
// matrices, Metal simdgroup matrices) with f16 operands and f32 accumulation. A workgroup of WM × WN subgroups owns
// a BM × BN block of C; each subgroup keeps TM × TN result matrices of SM × SN. BK-deep slices of op(A) and op(B) are
// converted to f16 in workgroup memory ([m][k] and [n][k], k contiguous), where the subgroup matrices load them.
// The code is generated: the matrices' shapes must be constants, and the TM × TN accumulators are unrolled so that
// they stay in registers. Operands are rounded to f16 (11-bit mantissa, |x| ≤ 65504), so callers opt in; A can be
// scaled into f16's range first (flag 16, from absMax: gradients).
import type { Gpu, KernelSpec, SubgroupMatrixConfig } from "@webart/gpu";
import params from "./params.wgsl";

export const COOP_FEATURE = "chromium-experimental-subgroup-matrix";

export interface CoopGeometry {
  /** One subgroup matrix product: (SM × SK) · (SK × SN). */
  SM: number;
  SN: number;
  SK: number;
  /** Subgroups along m and n, and result matrices per subgroup along m and n. */
  WM: number;
  WN: number;
  TM: number;
  TN: number;
  BK: number;
  /** Lanes per subgroup (the adapter's largest subgroup size). */
  SG: number;
}

/** The f16 → f32 subgroup-matrix shape this device offers (preferring 16 × 16 × 16), or undefined. */
export function coopConfig(gpu: Gpu): SubgroupMatrixConfig | undefined {
  if (!gpu.features.has(COOP_FEATURE) || !gpu.features.has("shader-f16") || !gpu.subgroupMaxSize) return undefined;
  const ok = gpu.subgroupMatrixConfigs.filter((c) => c.componentType === "f16" && c.resultComponentType === "f32");
  return ok.find((c) => c.M === 16 && c.N === 16 && c.K === 16) ?? ok[0];
}

/** Workgroup shapes: subgroups (WM × WN), result matrices per subgroup (TM × TN) and the depth of a staged slice
 *  (BK), from the least workgroup memory to the most. On the H200 with scalar staging, 4 subgroups of 4 x 2 and 16
 *  of 2 x 2 beat 4 of 2 x 4 (64 x 128 blocks) and 4 of 4 x 4 (128 x 256, 38 KiB), which were dropped. The 64-deep
 *  slices halve the barriers a product (not yet measured on a GPU; a device whose workgroup memory is too small
 *  for one does not offer it). */
export const COOP_SHAPES = {
  "4x2x2": { WM: 2, WN: 2, TM: 2, TN: 2, BK: 32 }, // 128 threads, 64 × 64 of C, 14 KiB
  "8x4x2": { WM: 2, WN: 4, TM: 4, TN: 2, BK: 32 }, // 256 threads, 128 × 128, 28 KiB
  "16x2x2": { WM: 4, WN: 4, TM: 2, TN: 2, BK: 32 }, // 512 threads, 128 × 128, 36 KiB
  "8x4x2.k64": { WM: 2, WN: 4, TM: 4, TN: 2, BK: 64 }, // 256 threads, 128 × 128, 44 KiB
  "16x2x2.k64": { WM: 4, WN: 4, TM: 2, TN: 2, BK: 64 }, // 512 threads, 128 × 128, 52 KiB
} as const;
export type CoopShape = keyof typeof COOP_SHAPES;

/** Each device's geometry per shape (or why it cannot run it), worked out once: matmul asks at every dispatch. */
const geometries = new WeakMap<Gpu, Map<CoopShape, CoopGeometry | Error>>();

export function coopGeometry(gpu: Gpu, shape: CoopShape = "8x4x2"): CoopGeometry {
  let byShape = geometries.get(gpu);
  if (!byShape) geometries.set(gpu, (byShape = new Map()));
  let g = byShape.get(shape);
  if (!g) {
    try {
      g = makeGeometry(gpu, shape);
    } catch (e) {
      g = e as Error;
    }
    byShape.set(shape, g);
  }
  if (g instanceof Error) throw g;
  return g;
}

function makeGeometry(gpu: Gpu, shape: CoopShape): CoopGeometry {
  const c = coopConfig(gpu);
  if (!c) {
    throw new Error(
      `matmul: the coop variant needs the ${COOP_FEATURE} and shader-f16 features with an f16 -> f32 subgroup ` +
        `matrix shape; this device has ${gpu.subgroupMatrixConfigs.length ? JSON.stringify(gpu.subgroupMatrixConfigs) : "none"}`,
    );
  }
  const s = COOP_SHAPES[shape];
  if (!s) throw new Error(`matmul: unknown coop shape "${shape}" (${Object.keys(COOP_SHAPES).join(", ")})`);
  const g = { SM: c.M, SN: c.N, SK: c.K, ...s, BK: Math.max(s.BK, c.K), SG: gpu.subgroupMaxSize };
  const threads = g.SG * g.WM * g.WN;
  const bytes = coopWorkgroupBytes(g);
  if (threads > gpu.limits.maxComputeInvocationsPerWorkgroup || bytes > gpu.limits.maxComputeWorkgroupStorageSize) {
    throw new Error(
      `matmul: coop shape ${shape} needs ${threads} threads and ${bytes} bytes of workgroup memory; this device allows ` +
        `${gpu.limits.maxComputeInvocationsPerWorkgroup} and ${gpu.limits.maxComputeWorkgroupStorageSize}`,
    );
  }
  return g;
}

/** The coop shapes this device can run. */
export function coopShapes(gpu: Gpu): CoopShape[] {
  if (!coopConfig(gpu)) return [];
  return (Object.keys(COOP_SHAPES) as CoopShape[]).filter((s) => {
    try {
      coopGeometry(gpu, s);
      return true;
    } catch {
      return false;
    }
  });
}

/** Workgroup memory of a geometry: the two staged slices (f16, padded rows) and one f32 result matrix a subgroup. */
function coopWorkgroupBytes(g: CoopGeometry): number {
  const LDS = g.BK + 8;
  return (g.WM * g.TM * g.SM + g.WN * g.TN * g.SN) * LDS * 2 + g.WM * g.WN * g.SM * g.SN * 4;
}

/**
 * How a coop kernel stages its operands into workgroup memory. Scalar: one 4-byte load an element (any layout).
 * vecA: A's rows (not transposed) read 16 bytes (4 elements) a load along k; vecB: B read 16 bytes (4 f32 or 8
 * bf16/f16 elements) a load along its contiguous axis, k (nt) or n (nn). Each needs that axis's extent, the row
 * stride and the offsets to be multiples of the vector (matmul() checks, and stages scalar otherwise).
 */
export interface CoopStaging {
  vecA: boolean;
  vecB: boolean;
}
export const COOP_STAGINGS = ["scalar", "vec"] as const;
export type CoopStagingChoice = (typeof COOP_STAGINGS)[number];

/** Elements of B in one 16-byte vector. */
export function coopVectorB(bKind: number): number {
  return bKind === 0 ? 4 : 8;
}

/** The staging a geometry can run (what coopSpec builds for a request): a vectorised operand needs a whole number
 *  of vectors per thread. */
export function coopStagingOf(g: CoopGeometry, bKind: number, s: CoopStaging): CoopStaging {
  const { BM, BN } = coopBlock(g);
  const T = g.SG * g.WM * g.WN;
  return {
    vecA: s.vecA && (BM * g.BK) % (4 * T) === 0,
    vecB: s.vecB && (BN * g.BK) % (coopVectorB(bKind) * T) === 0,
  };
}

/** Specs by geometry (coopGeometry hands out one object per device and shape), then B's storage, `direct` and the
 *  staging. */
const specs = new WeakMap<CoopGeometry, Map<string, KernelSpec>>();

/** The kernel for a geometry and B's storage (0 f32, 1 bf16, 2 f16). `direct`: whole blocks load and store C
 *  straight from the subgroup matrices (off where robust buffer access may clamp a matrix's whole span). `staging`
 *  is cut to what the geometry can run. */
export function coopSpec(
  g: CoopGeometry,
  bKind: number,
  direct: boolean,
  staging: CoopStaging = { vecA: false, vecB: false },
): KernelSpec {
  let byKey = specs.get(g);
  if (!byKey) specs.set(g, (byKey = new Map()));
  const st = coopStagingOf(g, bKind, staging);
  const key = `${bKind}.${direct}.${st.vecA}.${st.vecB}`;
  let s = byKey.get(key);
  if (!s)
    byKey.set(
      key,
      (s = { name: "matmul_forward_coop", code: coopCode(g, direct, bKind, st), overrides: { B_KIND: bKind } }),
    );
  return s;
}

/** params.wgsl with A and/or B declared as 16-byte vectors (and loadB, which reads B as words, dropped). */
function header(s: CoopStaging): string {
  const swap = (text: string, from: string, to: string) => {
    if (!text.includes(from)) throw new Error(`coop: params.wgsl no longer declares "${from}"`);
    return text.replace(from, to);
  };
  let h = params;
  if (s.vecA) h = swap(h, "var<storage, read> a: array<f32>;", "var<storage, read> a: array<vec4f>;");
  if (s.vecB) {
    h = swap(h, "var<storage, read> b: array<u32>;", "var<storage, read> b: array<vec4u>;");
    const at = h.indexOf("fn loadB(");
    if (at < 0) throw new Error("coop: params.wgsl no longer defines loadB");
    h = h.slice(0, at);
  }
  return h;
}

/**
 * The code that moves BK-deep slices of op(A) and op(B) into workgroup memory (As [m][k], Bs [n][k], rows LDS
 * apart), as elements of type `elem`: declarations of the registers that carry a slice, its loads (`prefetch`, for
 * the slice at kn, from clamped addresses so that every load is in flight at once) and its stores (`stage`, A
 * times sA). Shared by the kernel and by coopStagingTestCode, which runs it on any device.
 */
function stagingCode(g: CoopGeometry, bKind: number, st: CoopStaging, elem: "f16" | "f32") {
  const { BK } = g;
  const { BM, BN } = coopBlock(g);
  const T = g.SG * g.WM * g.WN;
  const LDS = BK + 8;
  const lines = (n: number, f: (i: number) => string) => Array.from({ length: n }, (_, i) => f(i)).join("\n");
  const decl: string[] = [];
  const prefetch: string[] = [];
  const stage: string[] = [];
  // An element a load, any layout: element i of a thread's share is its row r (m of A, n of B) and k within the slice;
  // consecutive threads walk the operand's unit-stride axis (k where kContig), so global loads coalesce.
  const scalar = (o: {
    reg: string;
    R: number;
    kContig: string;
    block: string;
    extent: string;
    ld: string;
    base: string;
  }) => {
    const { reg, R, kContig, block, extent, ld, base } = o;
    const isA = reg === "pa";
    const idx = (i: number) =>
      `let l = tid + ${i * T}u; let r = select(l % ${R}u, l / ${BK}u, ${kContig}); let k = select(l / ${R}u, l % ${BK}u, ${kContig});`;
    const at = `${base} + select(gkc * ${ld} + grc, grc * ${ld} + gkc, ${kContig})`;
    decl.push(lines((R * BK) / T, (i) => `  var ${reg}${i} = 0.0;`));
    prefetch.push(
      lines(
        (R * BK) / T,
        (i) =>
          `    { ${idx(i)} let gr = ${block} + r; let gk = kn + k; let grc = min(gr, ${extent} - 1u); let gkc = min(gk, p.K - 1u);\n` +
          `      ${reg}${i} = select(0.0, ${isA ? `a[${at}]` : `loadB(${at})`}, gr < ${extent} && gk < p.K); }`,
      ),
    );
    const dst = isA ? `As[r * ${LDS}u + k] = ${elem}(${reg}$I * sA);` : `Bs[r * ${LDS}u + k] = ${elem}(${reg}$I);`;
    stage.push(lines((R * BK) / T, (i) => `    { ${idx(i)} ${dst.replace("$I", String(i))} }`));
  };
  if (st.vecA) {
    // Vectors along k: consecutive threads take consecutive vectors of a row.
    const NV = (BM * BK) / (4 * T);
    const idx = (i: number) => `let l = tid + ${i * T}u; let m = l / ${BK / 4}u; let k = (l % ${BK / 4}u) * 4u;`;
    decl.push(lines(NV, (i) => `  var pa${i} = vec4f();`));
    prefetch.push(
      lines(
        NV,
        (i) =>
          `    { ${idx(i)} let gm = mBlock + m; let gk = kn + k; let gmc = min(gm, p.M - 1u); let gkc = min(gk, p.K - 4u);\n` +
          `      pa${i} = select(vec4f(), a[(aBase + gmc * p.lda + gkc) / 4u], gm < p.M && gk < p.K); }`,
      ),
    );
    stage.push(
      lines(
        NV,
        (i) =>
          `    { ${idx(i)} let v = pa${i} * sA; let o = m * ${LDS}u + k;\n` +
          `      As[o] = ${elem}(v.x); As[o + 1u] = ${elem}(v.y); As[o + 2u] = ${elem}(v.z); As[o + 3u] = ${elem}(v.w); }`,
      ),
    );
  } else scalar({ reg: "pa", R: BM, kContig: "!tA", block: "mBlock", extent: "p.M", ld: "p.lda", base: "aBase" });
  if (st.vecB) {
    const V = coopVectorB(bKind);
    const NV = (BN * BK) / (V * T);
    // Element j of a 16-byte vector of B as f32.
    const el = (i: number, j: number) => {
      const word = `pb${i}.${"xyzw"[bKind === 0 ? j : j >> 1]}`;
      if (bKind === 0) return `bitcast<f32>(${word})`;
      return `${j & 1 ? "hi" : "lo"}(${word})`;
    };
    // tB: vectors along k of B's rows (n); else along n of its rows (k).
    const idx = (i: number) =>
      `let l = tid + ${i * T}u; let n = select((l % ${BN / V}u) * ${V}u, l / ${BK / V}u, tB); ` +
      `let k = select(l / ${BN / V}u, (l % ${BK / V}u) * ${V}u, tB);`;
    decl.push(lines(NV, (i) => `  var pb${i} = vec4u();`));
    prefetch.push(
      lines(
        NV,
        (i) =>
          `    { ${idx(i)} let gn = nBlock + n; let gk = kn + k;\n` +
          `      let gnc = min(gn, p.N - select(${V}u, 1u, tB)); let gkc = min(gk, p.K - select(1u, ${V}u, tB));\n` +
          `      pb${i} = select(vec4u(), b[(bBase + select(gkc * p.ldb + gnc, gnc * p.ldb + gkc, tB)) / ${V}u], gn < p.N && gk < p.K); }`,
      ),
    );
    // Element j goes to (n, k + j) under tB, else to (n + j, k).
    stage.push(
      lines(
        NV,
        (i) =>
          `    { ${idx(i)} let o = n * ${LDS}u + k; let d = select(${LDS}u, 1u, tB);\n      ` +
          Array.from({ length: V }, (_, j) => `Bs[o + ${j}u * d] = ${elem}(${el(i, j)});`).join(" ") +
          " }",
      ),
    );
  } else scalar({ reg: "pb", R: BN, kContig: "tB", block: "nBlock", extent: "p.N", ld: "p.ldb", base: "bBase" });
  // The workgroup's block of C (x: n, y: m, z: batch), its operands' layouts and where they start.
  const setup = [
    "  let tA = (p.flags & 1u) != 0u;",
    "  let tB = (p.flags & 2u) != 0u;",
    `  let mBlock = wid.y * ${BM}u;`,
    `  let nBlock = wid.x * ${BN}u;`,
    "  let aBase = p.offA + wid.z * p.sA;",
    "  let bBase = p.offB + wid.z * p.sB;",
  ].join("\n");
  return { setup, decl: decl.join("\n"), prefetch: prefetch.join("\n"), stage: stage.join("\n") };
}

/**
 * A kernel that runs coop's staging for geometry g (its subgroup matrices left out, workgroup memory in f32), for
 * devices without subgroup matrices to test it on: for every workgroup (block of C) and every slice of K in turn it
 * writes the staged [m][k] slice of op(A) (BM × BK) then [n][k] of op(B) (BN × BK) into c, from
 * ((block · slices) + slice) · (BM + BN) · BK, blocks numbered x fastest. Same parameters and bindings as the matmul.
 */
export function coopStagingTestCode(g: CoopGeometry, bKind: number, staging: CoopStaging): string {
  const st = coopStagingOf(g, bKind, staging);
  const { BK } = g;
  const { BM, BN } = coopBlock(g);
  const T = g.SG * g.WM * g.WN;
  const LDS = BK + 8;
  const code = stagingCode(g, bKind, st, "f32");
  return `${header(st)}
var<workgroup> As: array<f32, ${BM * LDS}>;
var<workgroup> Bs: array<f32, ${BN * LDS}>;

@compute @workgroup_size(${T})
fn coop_staging(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3u,
                @builtin(num_workgroups) nwg: vec3u) {
${code.setup}
  let sA = 1.0;
  if ((p.flags & 4u) != 0u) { c[0] = bias[0]; } // keeps bias in the layout (the matmul's bindings)
  let slices = (p.K + ${BK - 1}u) / ${BK}u;
  let block = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
${code.decl}
  var kn = 0u;
${code.prefetch}
  for (var s = 0u; s < slices; s++) {
${code.stage}
    workgroupBarrier();
    let out = p.offC + (block * slices + s) * ${(BM + BN) * BK}u;
    for (var e = tid; e < ${BM * BK}u; e += ${T}u) { c[out + e] = As[(e / ${BK}u) * ${LDS}u + e % ${BK}u]; }
    for (var e = tid; e < ${BN * BK}u; e += ${T}u) { c[out + ${BM * BK}u + e] = Bs[(e / ${BK}u) * ${LDS}u + e % ${BK}u]; }
    kn = (s + 1u) * ${BK}u;
${code.prefetch}
    workgroupBarrier();
  }
}
`;
}

function coopCode(g: CoopGeometry, direct: boolean, bKind: number, st: CoopStaging): string {
  const { SM, SN, SK, WM, WN, TM, TN, BK, SG } = g;
  const BM = WM * TM * SM;
  const BN = WN * TN * SN;
  const T = SG * WM * WN; // threads
  const LDS = BK + 8; // rows of the staged slices, padded (16 bytes) against bank conflicts
  const staging = stagingCode(g, bKind, st, "f16");
  const L = `subgroup_matrix_left<f16, ${SK}, ${SM}>`;
  const R = `subgroup_matrix_right<f16, ${SN}, ${SK}>`;
  const RES = `subgroup_matrix_result<f32, ${SN}, ${SM}>`;
  const ij: [number, number][] = [];
  for (let i = 0; i < TM; i++) for (let j = 0; j < TN; j++) ij.push([i, j]);
  const lines = (n: number, f: (i: number) => string) => Array.from({ length: n }, (_, i) => f(i)).join("\n");
  const step = [
    lines(
      TM,
      (i) => `      let l${i} = subgroupMatrixLoad<${L}, row_major>(&As, (m0 + ${i * SM}u) * ${LDS}u + kk, ${LDS}u);`,
    ),
    lines(
      TN,
      (j) => `      let r${j} = subgroupMatrixLoad<${R}, col_major>(&Bs, (n0 + ${j * SN}u) * ${LDS}u + kk, ${LDS}u);`,
    ),
    ij.map(([i, j]) => `      acc${i}${j} = subgroupMatrixMultiplyAccumulate(l${i}, r${j}, acc${i}${j});`).join("\n"),
  ].join("\n");
  const at = (i: number, j: number) => `cBase + (mBlock + m0 + ${i * SM}u) * p.ldc + nBlock + n0 + ${j * SN}u`;
  const loadC = ij.map(([i, j]) => `    acc${i}${j} = subgroupMatrixLoad<${RES}, row_major>(&c, ${at(i, j)}, p.ldc);`);
  const storeC = ij.map(([i, j]) => `    subgroupMatrixStore<row_major>(&c, ${at(i, j)}, acc${i}${j}, p.ldc);`);
  // Partial blocks, a bias or alpha: each matrix goes through the subgroup's own ${SM} x ${SN} of workgroup memory.
  const staged = ij
    .map(
      ([i, j]) => `  subgroupMatrixStore<row_major>(&Cs, sg * ${SM * SN}u, acc${i}${j}, ${SN}u);
  workgroupBarrier();
  epilogue(m0 + ${i * SM}u, n0 + ${j * SN}u, sg, lane, mBlock, nBlock, cBase, alpha);
  workgroupBarrier();`,
    )
    .join("\n");
  return `enable f16;
enable chromium_experimental_subgroup_matrix;
// Offsets depend on the subgroup's index, which the analysis cannot see is uniform within a subgroup.
diagnostic(off, chromium.subgroup_matrix_uniformity);

${header(st)}
var<workgroup> As: array<f16, ${BM * LDS}>; // [m][k]
var<workgroup> Bs: array<f16, ${BN * LDS}>; // [n][k]
var<workgroup> Cs: array<f32, ${WM * WN * SM * SN}>; // one result matrix per subgroup

// The subgroup's staged matrix (rows r0.., columns c0.. of the block) into C, times alpha (A's scale undone), with
// bias and accumulate.
fn epilogue(r0: u32, c0: u32, sg: u32, lane: u32, mBlock: u32, nBlock: u32, cBase: u32, alpha: f32) {
  for (var e = lane; e < ${SM * SN}u; e += ${SG}u) {
    let m = mBlock + r0 + e / ${SN}u;
    let n = nBlock + c0 + e % ${SN}u;
    if (m < p.M && n < p.N) {
      let idx = cBase + m * p.ldc + n;
      var v = alpha * Cs[sg * ${SM * SN}u + e];
      if ((p.flags & 4u) != 0u) { v += bias[p.offBias + n]; }
      if ((p.flags & 8u) != 0u) { v += c[idx]; }
      c[idx] = v;
    }
  }
}

@compute @workgroup_size(${T})
fn matmul_forward_coop(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3u) {
${staging.setup}
  let cBase = p.offC + wid.z * p.sC;
  let sg = tid / ${SG}u;
  let lane = tid % ${SG}u;
  let m0 = (sg / ${WN}u) * ${TM * SM}u;
  let n0 = (sg % ${WN}u) * ${TN * SN}u;
  // Flag 16 (scaled A): bias[offBias] holds max |A| (absMax); A is multiplied by the power of two 2^s that brings it
  // to [2^14, 2^15) before rounding to f16 (whose normal range is 6.1e-5 to 65504: gradients would underflow), and
  // the sums by 2^-s after. Both are exact.
  var sA = 1.0;
  var alpha = p.alpha;
  if ((p.flags & 16u) != 0u) {
    let e = i32((bitcast<u32>(bias[p.offBias]) >> 23u) & 0xffu) - 127; // floor(log2(max |A|))
    let s = clamp(14 - e, -126, 126);
    sA = bitcast<f32>(u32(127 + s) << 23u);
    alpha *= bitcast<f32>(u32(127 - s) << 23u);
  }
  // A whole block with no bias, no scale and alpha 1 loads C (to accumulate) and stores it straight from the matrices.
  let full = ${direct} && mBlock + ${BM}u <= p.M && nBlock + ${BN}u <= p.N && (p.flags & 20u) == 0u && p.alpha == 1.0 &&
    p.ldc % 4u == 0u && cBase % 4u == 0u;
${ij.map(([i, j]) => `  var acc${i}${j} = ${RES}();`).join("\n")}
  if (full && (p.flags & 8u) != 0u) {
${loadC.join("\n")}
  }
${staging.decl}
  var kn = 0u;
${staging.prefetch}
  for (var k0 = 0u; k0 < p.K; k0 += ${BK}u) {
${staging.stage}
    workgroupBarrier();
    // The next slice's loads are in flight while this one multiplies.
    kn = k0 + ${BK}u;
${staging.prefetch}
    for (var kk = 0u; kk < ${BK}u; kk += ${SK}u) {
${step}
    }
    workgroupBarrier();
  }
  if (full) {
${storeC.join("\n")}
    return;
  }
${staged}
}
`;
}

/** Threads per workgroup along n and m, and C elements per workgroup along each (for the grid). */
export function coopBlock(g: CoopGeometry): { BM: number; BN: number } {
  return { BM: g.WM * g.TM * g.SM, BN: g.WN * g.TN * g.SN };
}
