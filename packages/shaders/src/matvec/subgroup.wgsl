// Decode matvec, subgroup variant (same contract and bindings as forward.wgsl): each subgroup owns
// 16 output columns at a time, its lanes split K, and subgroupAdd reduces; no barriers anywhere.
enable subgroups;
diagnostic(off, subgroup_uniformity); // lanes leave the K loops at different trips and reconverge after them

struct Params {
  M: u32, N: u32, K: u32, flags: u32, // flags: 1 bias
  ldx: u32, ldy: u32, offW: u32, offY: u32,
  offBias: u32, offX: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>; // f32 bits, or two bf16/f16 per word
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override WG: u32 = 16u; // a power of two
override MT: u32 = 8u; // rows of x per pass, 1..8
override CG: u32 = 4u; // groups of 16 columns per workgroup

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

var<private> acc: array<vec4f, 32>; // row m0 + i, columns 4j..4j+3 at 4i + j

// Adds x[m0 + i, k] · W[n0 + 0..15, k] (as w0..w3) for rows i < MT; xr0/xr1 are the rows' x offsets.
fn rows(k: u32, w0: vec4f, w1: vec4f, w2: vec4f, w3: vec4f, xr0: vec4u, xr1: vec4u) {
  var v = x[xr0.x + k]; acc[0] += v * w0; acc[1] += v * w1; acc[2] += v * w2; acc[3] += v * w3;
  if (MT > 1u) { v = x[xr0.y + k]; acc[4] += v * w0; acc[5] += v * w1; acc[6] += v * w2; acc[7] += v * w3; }
  if (MT > 2u) { v = x[xr0.z + k]; acc[8] += v * w0; acc[9] += v * w1; acc[10] += v * w2; acc[11] += v * w3; }
  if (MT > 3u) { v = x[xr0.w + k]; acc[12] += v * w0; acc[13] += v * w1; acc[14] += v * w2; acc[15] += v * w3; }
  if (MT > 4u) { v = x[xr1.x + k]; acc[16] += v * w0; acc[17] += v * w1; acc[18] += v * w2; acc[19] += v * w3; }
  if (MT > 5u) { v = x[xr1.y + k]; acc[20] += v * w0; acc[21] += v * w1; acc[22] += v * w2; acc[23] += v * w3; }
  if (MT > 6u) { v = x[xr1.z + k]; acc[24] += v * w0; acc[25] += v * w1; acc[26] += v * w2; acc[27] += v * w3; }
  if (MT > 7u) { v = x[xr1.w + k]; acc[28] += v * w0; acc[29] += v * w1; acc[30] += v * w2; acc[31] += v * w3; }
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
  let lastN = vec4u(p.N - 1u);
  let lastM = vec4u(p.M - 1u);
  // 16-bit rows that all start on a word boundary take k in pairs, one load per word.
  let kPairs = select(0u, p.K & ~1u, W_KIND != 0u && ((p.offW | p.K) & 1u) == 0u);
  let c = vec4u(0u, 1u, 2u, 3u);
  for (var i = 0u; i * nsg < CG; i++) {
    let n0 = ((wid.x + wid.y * nwg.x) * CG + sg + i * nsg) * 16u;
    // W row starts of columns n0..n0+15 (clamped ones are computed, not stored)
    let r0 = p.offW + min(n0 + c, lastN) * p.K;
    let r1 = p.offW + min(n0 + 4u + c, lastN) * p.K;
    let r2 = p.offW + min(n0 + 8u + c, lastN) * p.K;
    let r3 = p.offW + min(n0 + 12u + c, lastN) * p.K;
    for (var m0 = 0u; m0 < p.M; m0 += MT) {
      let xr0 = p.offX + min(m0 + c, lastM) * p.ldx;
      let xr1 = p.offX + min(m0 + 4u + c, lastM) * p.ldx;
      acc = array<vec4f, 32>(); // whole-array writes and constant indices keep acc out of gathers
      let u0 = r0 / 2u; let u1 = r1 / 2u; let u2 = r2 / 2u; let u3 = r3 / 2u; // row starts in words (when even)
      for (var q = lane; 2u * q < kPairs; q += S) { // q: word within the row, k = 2q
        let a = vec4u(w[u0.x + q], w[u0.y + q], w[u0.z + q], w[u0.w + q]);
        let b = vec4u(w[u1.x + q], w[u1.y + q], w[u1.z + q], w[u1.w + q]);
        let d = vec4u(w[u2.x + q], w[u2.y + q], w[u2.z + q], w[u2.w + q]);
        let e = vec4u(w[u3.x + q], w[u3.y + q], w[u3.z + q], w[u3.w + q]);
        rows(q + q, lo4(a), lo4(b), lo4(d), lo4(e), xr0, xr1);
        rows(q + q + 1u, hi4(a), hi4(b), hi4(d), hi4(e), xr0, xr1);
      }
      // f32, or 16-bit rows that start mid-word: lanes take consecutive single k.
      for (var k = kPairs + lane; k < p.K; k += S) {
        let w0 = vec4f(one(r0.x + k), one(r0.y + k), one(r0.z + k), one(r0.w + k));
        let w1 = vec4f(one(r1.x + k), one(r1.y + k), one(r1.z + k), one(r1.w + k));
        let w2 = vec4f(one(r2.x + k), one(r2.y + k), one(r2.z + k), one(r2.w + k));
        let w3 = vec4f(one(r3.x + k), one(r3.y + k), one(r3.z + k), one(r3.w + k));
        rows(k, w0, w1, w2, w3, xr0, xr1);
      }
      var t: array<vec4f, 32>;
      t[0] = subgroupAdd(acc[0]); t[1] = subgroupAdd(acc[1]);
      t[2] = subgroupAdd(acc[2]); t[3] = subgroupAdd(acc[3]);
      if (MT > 1u) {
        t[4] = subgroupAdd(acc[4]); t[5] = subgroupAdd(acc[5]);
        t[6] = subgroupAdd(acc[6]); t[7] = subgroupAdd(acc[7]);
      }
      if (MT > 2u) {
        t[8] = subgroupAdd(acc[8]); t[9] = subgroupAdd(acc[9]);
        t[10] = subgroupAdd(acc[10]); t[11] = subgroupAdd(acc[11]);
      }
      if (MT > 3u) {
        t[12] = subgroupAdd(acc[12]); t[13] = subgroupAdd(acc[13]);
        t[14] = subgroupAdd(acc[14]); t[15] = subgroupAdd(acc[15]);
      }
      if (MT > 4u) {
        t[16] = subgroupAdd(acc[16]); t[17] = subgroupAdd(acc[17]);
        t[18] = subgroupAdd(acc[18]); t[19] = subgroupAdd(acc[19]);
      }
      if (MT > 5u) {
        t[20] = subgroupAdd(acc[20]); t[21] = subgroupAdd(acc[21]);
        t[22] = subgroupAdd(acc[22]); t[23] = subgroupAdd(acc[23]);
      }
      if (MT > 6u) {
        t[24] = subgroupAdd(acc[24]); t[25] = subgroupAdd(acc[25]);
        t[26] = subgroupAdd(acc[26]); t[27] = subgroupAdd(acc[27]);
      }
      if (MT > 7u) {
        t[28] = subgroupAdd(acc[28]); t[29] = subgroupAdd(acc[29]);
        t[30] = subgroupAdd(acc[30]); t[31] = subgroupAdd(acc[31]);
      }
      if (lane == 0u) {
        for (var mm = 0u; mm < MT && m0 + mm < p.M; mm++) {
          for (var j = 0u; j < 16u; j++) {
            let n = n0 + j;
            if (n < p.N) {
              var o = t[4u * mm + j / 4u][j % 4u];
              if ((p.flags & 1u) != 0u) { o += bias[p.offBias + n]; }
              y[p.offY + (m0 + mm) * p.ldy + n] = o;
            }
          }
        }
      }
    }
  }
}
