// Decode matvec y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for a few rows M. Memory-bound: a workgroup
// owns 4 output columns, its threads split K, and each W element fetched serves MT rows of x at once.
struct Params {
  M: u32, N: u32, K: u32, flags: u32, // flags: 1 bias
  ldx: u32, ldy: u32, offW: u32, offY: u32, // offW in elements (16-bit ones when packed)
  offBias: u32, offX: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>; // f32 bits, or two bf16/f16 per word
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override WG: u32 = 64u; // threads splitting K (a power of two)
override MT: u32 = 4u; // rows of x per pass: 1, 2, 3 or 4

var<workgroup> red: array<vec4f, 4u * WG>; // (MT, WG) partial sums of the 4 columns

fn unpack(v: u32) -> vec2f {
  if (W_KIND == 1u) { return vec2f(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u)); }
  return unpack2x16float(v);
}

// 16-bit elements e and e + 1 (both must exist); a row may start mid-word when K is odd.
fn pair(e: u32) -> vec2f {
  let lo = unpack(w[e >> 1u]);
  if ((e & 1u) == 0u) { return lo; }
  return vec2f(lo.y, unpack(w[(e >> 1u) + 1u]).x);
}

@compute @workgroup_size(WG)
fn matvec_forward(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u,
                  @builtin(num_workgroups) nwg: vec3u) {
  let n0 = (wid.x + wid.y * nwg.x) * 4u;
  if (n0 >= p.N) { return; } // whole workgroup: grid padding
  let t = lid.x;
  let last = p.N - 1u;
  let r = p.offW + vec4u(n0, min(n0 + 1u, last), min(n0 + 2u, last), min(n0 + 3u, last)) * p.K; // row starts
  for (var m0 = 0u; m0 < p.M; m0 += MT) {
    // Rows past M are clamped for loading (their sums are dropped); later passes re-read W from cache.
    let xr = p.offX + vec4u(m0, min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.ldx;
    var s0 = vec4f(); var s1 = vec4f(); var s2 = vec4f(); var s3 = vec4f(); // rows m0..m0+3 × 4 columns
    if (W_KIND == 0u) {
      // Consecutive threads take consecutive k: contiguous loads of W and x.
      for (var k = t; k < p.K; k += WG) {
        let wv = bitcast<vec4f>(vec4u(w[r.x + k], w[r.y + k], w[r.z + k], w[r.w + k]));
        s0 += x[xr.x + k] * wv;
        if (MT > 1u) { s1 += x[xr.y + k] * wv; }
        if (MT > 2u) { s2 += x[xr.z + k] * wv; }
        if (MT > 3u) { s3 += x[xr.w + k] * wv; }
      }
    } else {
      // Each thread takes pairs of k, one packed word per column when the row starts on a word.
      for (var k = 2u * t; k + 1u < p.K; k += 2u * WG) {
        let c0 = pair(r.x + k); let c1 = pair(r.y + k); let c2 = pair(r.z + k); let c3 = pair(r.w + k);
        let we = vec4f(c0.x, c1.x, c2.x, c3.x);
        let wo = vec4f(c0.y, c1.y, c2.y, c3.y);
        s0 += x[xr.x + k] * we + x[xr.x + k + 1u] * wo;
        if (MT > 1u) { s1 += x[xr.y + k] * we + x[xr.y + k + 1u] * wo; }
        if (MT > 2u) { s2 += x[xr.z + k] * we + x[xr.z + k + 1u] * wo; }
        if (MT > 3u) { s3 += x[xr.w + k] * we + x[xr.w + k + 1u] * wo; }
      }
      if ((p.K & 1u) == 1u && t == 0u) { // odd K: the last element, unpaired
        let k = p.K - 1u;
        let e = r + k;
        let h = vec4u(e & vec4u(1u)) == vec4u(1u);
        let v = vec4u(w[e.x >> 1u], w[e.y >> 1u], w[e.z >> 1u], w[e.w >> 1u]);
        let wv = vec4f(select(unpack(v.x).x, unpack(v.x).y, h.x), select(unpack(v.y).x, unpack(v.y).y, h.y),
                       select(unpack(v.z).x, unpack(v.z).y, h.z), select(unpack(v.w).x, unpack(v.w).y, h.w));
        s0 += x[xr.x + k] * wv; s1 += x[xr.y + k] * wv; s2 += x[xr.z + k] * wv; s3 += x[xr.w + k] * wv;
      }
    }
    red[t] = s0;
    if (MT > 1u) { red[WG + t] = s1; }
    if (MT > 2u) { red[2u * WG + t] = s2; }
    if (MT > 3u) { red[3u * WG + t] = s3; }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
      if (t < s) {
        for (var i = 0u; i < MT; i++) { red[i * WG + t] += red[i * WG + t + s]; }
      }
      workgroupBarrier();
    }
    if (t < MT && m0 + t < p.M) {
      let v = red[t * WG];
      for (var j = 0u; j < 4u; j++) {
        let n = n0 + j;
        if (n < p.N) {
          var o = v[j];
          if ((p.flags & 1u) != 0u) { o += bias[p.offBias + n]; }
          y[p.offY + (m0 + t) * p.ldy + n] = o;
        }
      }
    }
    workgroupBarrier(); // red is reused by the next pass
  }
}
