// Decode matvec, subgroup variant (same contract, bindings and fused options as forward.wgsl): each subgroup owns
// 16 rows of W at a time (16 output columns, or 8 gated ones), its lanes split K, and subgroupAdd reduces; no barriers.
// Parameters, bindings and the epilogue: common.wgsl (appended).
enable subgroups;
diagnostic(off, subgroup_uniformity); // lanes leave the K loops at different trips and reconverge after them

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>; // f32 bits, or two bf16/f16 per word
@group(0) @binding(4) var<storage, read> nw: array<f32>; // (K) RMSNorm weight
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override WG: u32 = 16u; // a power of two
override MT: u32 = 8u; // rows of x per pass, 1..8
override CG: u32 = 4u; // groups of 16 rows of W per workgroup
override NORM: bool = false;
override GATE: u32 = 0u; // 0 none, 1 silu, 2 GELU tanh

// Per-lane shifts are scalarised on SwiftShader (no SIMD variable shift), so v << 16 is a multiply.
fn unpack(v: u32) -> vec2f {
  if (W_KIND == 1u) { return vec2f(bitcast<f32>(v * 0x10000u), bitcast<f32>(v & 0xffff0000u)); }
  return unpack2x16float(v);
}

// Element e of W, any dtype.
fn one(e: u32) -> f32 {
  if (W_KIND == 0u) { return bitcast<f32>(w[e]); }
  let v = unpack(w[e >> 1u]);
  return select(v.x, v.y, (e & 1u) == 1u);
}

var<private> acc: array<vec4f, 32>; // row m0 + i, W rows 4j..4j+3 at 4i + j
var<private> sq0: vec4f; // NORM: Σ x² of rows m0..m0+3
var<private> sq1: vec4f; // and m0+4..m0+7

// Adds x[m0 + i, k] · W[16 rows, k] (as w0..w3, scaled by the norm weight under NORM) for rows i < MT; xr0/xr1 are
// the rows' x offsets. Under NORM the rows' Σ x² too.
fn rows(k: u32, w0: vec4f, w1: vec4f, w2: vec4f, w3: vec4f, xr0: vec4u, xr1: vec4u) {
  var v = x[xr0.x + k]; acc[0] += v * w0; acc[1] += v * w1; acc[2] += v * w2; acc[3] += v * w3;
  if (NORM) { sq0.x += v * v; }
  if (MT > 1u) {
    v = x[xr0.y + k]; acc[4] += v * w0; acc[5] += v * w1; acc[6] += v * w2; acc[7] += v * w3;
    if (NORM) { sq0.y += v * v; }
  }
  if (MT > 2u) {
    v = x[xr0.z + k]; acc[8] += v * w0; acc[9] += v * w1; acc[10] += v * w2; acc[11] += v * w3;
    if (NORM) { sq0.z += v * v; }
  }
  if (MT > 3u) {
    v = x[xr0.w + k]; acc[12] += v * w0; acc[13] += v * w1; acc[14] += v * w2; acc[15] += v * w3;
    if (NORM) { sq0.w += v * v; }
  }
  if (MT > 4u) {
    v = x[xr1.x + k]; acc[16] += v * w0; acc[17] += v * w1; acc[18] += v * w2; acc[19] += v * w3;
    if (NORM) { sq1.x += v * v; }
  }
  if (MT > 5u) {
    v = x[xr1.y + k]; acc[20] += v * w0; acc[21] += v * w1; acc[22] += v * w2; acc[23] += v * w3;
    if (NORM) { sq1.y += v * v; }
  }
  if (MT > 6u) {
    v = x[xr1.z + k]; acc[24] += v * w0; acc[25] += v * w1; acc[26] += v * w2; acc[27] += v * w3;
    if (NORM) { sq1.z += v * v; }
  }
  if (MT > 7u) {
    v = x[xr1.w + k]; acc[28] += v * w0; acc[29] += v * w1; acc[30] += v * w2; acc[31] += v * w3;
    if (NORM) { sq1.w += v * v; }
  }
}

// Row starts of W rows c..c+3 of a group whose first output column is n0 (GATE: rows 8..15 are the up rows).
fn rows4(n0: u32, c: u32) -> vec4u {
  let last = p.N - 1u;
  if (GATE != 0u) {
    let up = c >= 8u;
    let n = n0 + c % 8u;
    return vec4u(rowOf(min(n, last), up), rowOf(min(n + 1u, last), up), rowOf(min(n + 2u, last), up),
                 rowOf(min(n + 3u, last), up));
  }
  return vec4u(rowOf(min(n0 + c, last), false), rowOf(min(n0 + c + 1u, last), false),
               rowOf(min(n0 + c + 2u, last), false), rowOf(min(n0 + c + 3u, last), false));
}

// Elements k (low halves) and k + 1 (high halves) of four columns' words.
fn lo4(v: vec4u) -> vec4f {
  if (W_KIND == 1u) { return bitcast<vec4f>(v * 0x10000u); }
  return vec4f(unpack2x16float(v.x).x, unpack2x16float(v.y).x, unpack2x16float(v.z).x, unpack2x16float(v.w).x);
}
fn hi4(v: vec4u) -> vec4f {
  if (W_KIND == 1u) { return bitcast<vec4f>(v & vec4u(0xffff0000u)); }
  return vec4f(unpack2x16float(v.x).y, unpack2x16float(v.y).y, unpack2x16float(v.z).y, unpack2x16float(v.w).y);
}

@compute @workgroup_size(WG)
fn matvec_forward_subgroup(
  @builtin(local_invocation_index) li: u32,
  @builtin(subgroup_invocation_id) lane: u32,
  @builtin(subgroup_size) sgSize: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let S = min(sgSize, WG); // lanes present in a subgroup (one may be larger than the workgroup)
  let nsg = WG / S;
  let sg = li / S; // subgroups are runs of consecutive invocations, as on every implementation
  let lastM = vec4u(p.M - 1u);
  let cols = select(16u, 8u, GATE != 0u); // output columns per group of 16 W rows
  // 16-bit rows that all start on a word boundary take k in pairs, one load per word.
  let offs = p.seg[0].offW | p.seg[1].offW | p.seg[2].offW;
  let kPairs = select(0u, p.K & ~1u, W_KIND != 0u && ((offs | p.K) & 1u) == 0u);
  let c = vec4u(0u, 1u, 2u, 3u);
  for (var i = 0u; i * nsg < CG; i++) {
    let n0 = ((wid.x + wid.y * nwg.x) * CG + sg + i * nsg) * cols;
    if (n0 >= p.N) { break; } // past the last column (the same for the whole subgroup): the later groups are too
    // W row starts of the group's 16 rows (clamped ones are computed, not stored)
    let r0 = rows4(n0, 0u);
    let r1 = rows4(n0, 4u);
    let r2 = rows4(n0, 8u);
    let r3 = rows4(n0, 12u);
    for (var m0 = wid.z * MT; m0 < p.M; m0 += MT * nwg.z) { // row blocks: z of the grid (index.ts rowBlocks)
      let xr0 = p.offX + min(m0 + c, lastM) * p.ldx;
      let xr1 = p.offX + min(m0 + 4u + c, lastM) * p.ldx;
      acc = array<vec4f, 32>(); // whole-array writes and constant indices keep acc out of gathers
      sq0 = vec4f();
      sq1 = vec4f();
      let u0 = r0 / 2u; let u1 = r1 / 2u; let u2 = r2 / 2u; let u3 = r3 / 2u; // row starts in words (when even)
      for (var q = lane; 2u * q < kPairs; q += S) { // q: word within the row, k = 2q
        let a = vec4u(w[u0.x + q], w[u0.y + q], w[u0.z + q], w[u0.w + q]);
        let b = vec4u(w[u1.x + q], w[u1.y + q], w[u1.z + q], w[u1.w + q]);
        let d = vec4u(w[u2.x + q], w[u2.y + q], w[u2.z + q], w[u2.w + q]);
        let e = vec4u(w[u3.x + q], w[u3.y + q], w[u3.z + q], w[u3.w + q]);
        if (NORM) {
          let ge = nw[q + q];
          let go = nw[q + q + 1u];
          rows(q + q, ge * lo4(a), ge * lo4(b), ge * lo4(d), ge * lo4(e), xr0, xr1);
          rows(q + q + 1u, go * hi4(a), go * hi4(b), go * hi4(d), go * hi4(e), xr0, xr1);
        } else {
          rows(q + q, lo4(a), lo4(b), lo4(d), lo4(e), xr0, xr1);
          rows(q + q + 1u, hi4(a), hi4(b), hi4(d), hi4(e), xr0, xr1);
        }
      }
      // f32, or 16-bit rows that start mid-word: lanes take consecutive single k.
      for (var k = kPairs + lane; k < p.K; k += S) {
        let w0 = vec4f(one(r0.x + k), one(r0.y + k), one(r0.z + k), one(r0.w + k));
        let w1 = vec4f(one(r1.x + k), one(r1.y + k), one(r1.z + k), one(r1.w + k));
        let w2 = vec4f(one(r2.x + k), one(r2.y + k), one(r2.z + k), one(r2.w + k));
        let w3 = vec4f(one(r3.x + k), one(r3.y + k), one(r3.z + k), one(r3.w + k));
        if (NORM) {
          let gk = nw[k];
          rows(k, gk * w0, gk * w1, gk * w2, gk * w3, xr0, xr1);
        } else {
          rows(k, w0, w1, w2, w3, xr0, xr1);
        }
      }
      var tot: array<vec4f, 32>;
      tot[0] = subgroupAdd(acc[0]); tot[1] = subgroupAdd(acc[1]);
      tot[2] = subgroupAdd(acc[2]); tot[3] = subgroupAdd(acc[3]);
      if (MT > 1u) {
        tot[4] = subgroupAdd(acc[4]); tot[5] = subgroupAdd(acc[5]);
        tot[6] = subgroupAdd(acc[6]); tot[7] = subgroupAdd(acc[7]);
      }
      if (MT > 2u) {
        tot[8] = subgroupAdd(acc[8]); tot[9] = subgroupAdd(acc[9]);
        tot[10] = subgroupAdd(acc[10]); tot[11] = subgroupAdd(acc[11]);
      }
      if (MT > 3u) {
        tot[12] = subgroupAdd(acc[12]); tot[13] = subgroupAdd(acc[13]);
        tot[14] = subgroupAdd(acc[14]); tot[15] = subgroupAdd(acc[15]);
      }
      if (MT > 4u) {
        tot[16] = subgroupAdd(acc[16]); tot[17] = subgroupAdd(acc[17]);
        tot[18] = subgroupAdd(acc[18]); tot[19] = subgroupAdd(acc[19]);
      }
      if (MT > 5u) {
        tot[20] = subgroupAdd(acc[20]); tot[21] = subgroupAdd(acc[21]);
        tot[22] = subgroupAdd(acc[22]); tot[23] = subgroupAdd(acc[23]);
      }
      if (MT > 6u) {
        tot[24] = subgroupAdd(acc[24]); tot[25] = subgroupAdd(acc[25]);
        tot[26] = subgroupAdd(acc[26]); tot[27] = subgroupAdd(acc[27]);
      }
      if (MT > 7u) {
        tot[28] = subgroupAdd(acc[28]); tot[29] = subgroupAdd(acc[29]);
        tot[30] = subgroupAdd(acc[30]); tot[31] = subgroupAdd(acc[31]);
      }
      var rstd = array<f32, 8>(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0);
      if (NORM) {
        let q0 = inverseSqrt(subgroupAdd(sq0) / f32(p.K) + p.eps);
        let q1 = inverseSqrt(subgroupAdd(sq1) / f32(p.K) + p.eps);
        rstd = array<f32, 8>(q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w);
      }
      // The lanes share the group's outputs (every lane holds the sums).
      for (var mm = 0u; mm < MT && m0 + mm < p.M; mm++) {
        let m = m0 + mm;
        for (var j = lane; j < cols; j += S) {
          let n = n0 + j;
          if (n < p.N) {
            let v = tot[4u * mm + j / 4u][j % 4u] * rstd[mm];
            if (GATE != 0u) {
              let u = tot[4u * mm + 2u + j / 4u][j % 4u] * rstd[mm];
              store(m, n, act(finish(m, 0u, n, v)) * finish(m, 1u, n, u));
            } else if (ROPE_P > 0u) { // ROPE_P = 8: columns j and j + 8 of the group are a pair
              let jp = (j + ROPE_P) % 16u;
              ropeOut(m, n, v, tot[4u * mm + jp / 4u][jp % 4u] * rstd[mm]);
            } else {
              let s = segOf(n);
              store(m, n, finish(m, s, n - p.seg[s].base, v));
            }
          }
        }
      }
    }
  }
}
