// Decode matvec y[M, N] (=|+=) x[M, K] · W[N, K]ᵀ for a few rows M, with what decode runs around it folded in:
// the RMSNorm of x (NORM), W's rows in up to 3 segments at their own offsets (q, k, v side by side), per-segment
// bias and LoRA term s·t·Bᵀ, a gated activation act(seg 0)·seg 1 (GATE), and the residual add (accumulate).
// Memory-bound: a workgroup owns 4 rows of W, its threads split K, and each W element serves MT rows of x.
// Parameters, bindings and the epilogue: common.wgsl (appended).
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>; // f32 bits, or two bf16/f16 per word
@group(0) @binding(4) var<storage, read> nw: array<f32>; // (K) RMSNorm weight
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override WG: u32 = 64u; // threads splitting K (a power of two)
override MT: u32 = 4u; // rows of x per pass: 1, 2, 3 or 4
override NORM: bool = false;
override GATE: u32 = 0u; // 0 none, 1 silu (SwiGLU), 2 GELU tanh (GeGLU): y = act(seg 0) * seg 1

var<workgroup> red: array<vec4f, 4u * WG>; // (MT, WG) partial sums of the 4 rows of W
var<workgroup> redSq: array<vec4f, WG>; // NORM: partial sums of x² of the MT rows

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
  let cols = select(4u, 2u, GATE != 0u); // output columns per workgroup
  let n0 = (wid.x + wid.y * nwg.x) * cols;
  if (n0 >= p.N) { return; } // whole workgroup: grid padding
  let tid = lid.x;
  let last = p.N - 1u;
  var r: vec4u; // row starts of the 4 rows of W
  if (GATE != 0u) {
    let n1 = min(n0 + 1u, last);
    r = vec4u(rowOf(n0, false), rowOf(n1, false), rowOf(n0, true), rowOf(n1, true));
  } else {
    r = vec4u(rowOf(n0, false), rowOf(min(n0 + 1u, last), false), rowOf(min(n0 + 2u, last), false),
              rowOf(min(n0 + 3u, last), false));
  }
  for (var m0 = wid.z * MT; m0 < p.M; m0 += MT * nwg.z) { // row blocks: z of the grid (index.ts rowBlocks)
    // Rows past M are clamped for loading (their sums are dropped); later passes re-read W from cache.
    let xr = p.offX + vec4u(m0, min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.ldx;
    var s0 = vec4f(); var s1 = vec4f(); var s2 = vec4f(); var s3 = vec4f(); // rows m0..m0+3 × 4 rows of W
    var sq = vec4f(); // NORM: Σ x² of rows m0..m0+3
    if (W_KIND == 0u) {
      // Consecutive threads take consecutive k: contiguous loads of W and x.
      for (var k = tid; k < p.K; k += WG) {
        var wv = bitcast<vec4f>(vec4u(w[r.x + k], w[r.y + k], w[r.z + k], w[r.w + k]));
        if (NORM) { wv *= nw[k]; }
        var a = x[xr.x + k]; s0 += a * wv;
        if (NORM) { sq.x += a * a; }
        if (MT > 1u) { a = x[xr.y + k]; s1 += a * wv; if (NORM) { sq.y += a * a; } }
        if (MT > 2u) { a = x[xr.z + k]; s2 += a * wv; if (NORM) { sq.z += a * a; } }
        if (MT > 3u) { a = x[xr.w + k]; s3 += a * wv; if (NORM) { sq.w += a * a; } }
      }
    } else {
      // Each thread takes pairs of k, one packed word per column when the row starts on a word.
      for (var k = 2u * tid; k + 1u < p.K; k += 2u * WG) {
        let c0 = pair(r.x + k); let c1 = pair(r.y + k); let c2 = pair(r.z + k); let c3 = pair(r.w + k);
        var we = vec4f(c0.x, c1.x, c2.x, c3.x);
        var wo = vec4f(c0.y, c1.y, c2.y, c3.y);
        if (NORM) { we *= nw[k]; wo *= nw[k + 1u]; }
        var a = x[xr.x + k]; var b = x[xr.x + k + 1u]; s0 += a * we + b * wo;
        if (NORM) { sq.x += a * a + b * b; }
        if (MT > 1u) {
          a = x[xr.y + k]; b = x[xr.y + k + 1u]; s1 += a * we + b * wo;
          if (NORM) { sq.y += a * a + b * b; }
        }
        if (MT > 2u) {
          a = x[xr.z + k]; b = x[xr.z + k + 1u]; s2 += a * we + b * wo;
          if (NORM) { sq.z += a * a + b * b; }
        }
        if (MT > 3u) {
          a = x[xr.w + k]; b = x[xr.w + k + 1u]; s3 += a * we + b * wo;
          if (NORM) { sq.w += a * a + b * b; }
        }
      }
      if ((p.K & 1u) == 1u && tid == 0u) { // odd K: the last element, unpaired
        let k = p.K - 1u;
        let e = r + k;
        let h = vec4u(e & vec4u(1u)) == vec4u(1u);
        let v = vec4u(w[e.x >> 1u], w[e.y >> 1u], w[e.z >> 1u], w[e.w >> 1u]);
        var wv = vec4f(select(unpack(v.x).x, unpack(v.x).y, h.x), select(unpack(v.y).x, unpack(v.y).y, h.y),
                       select(unpack(v.z).x, unpack(v.z).y, h.z), select(unpack(v.w).x, unpack(v.w).y, h.w));
        let a = vec4f(x[xr.x + k], x[xr.y + k], x[xr.z + k], x[xr.w + k]);
        if (NORM) { wv *= nw[k]; sq += a * a; }
        s0 += a.x * wv; s1 += a.y * wv; s2 += a.z * wv; s3 += a.w * wv;
      }
    }
    red[tid] = s0;
    if (MT > 1u) { red[WG + tid] = s1; }
    if (MT > 2u) { red[2u * WG + tid] = s2; }
    if (MT > 3u) { red[3u * WG + tid] = s3; }
    if (NORM) { redSq[tid] = sq; }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
      if (tid < s) {
        for (var i = 0u; i < MT; i++) { red[i * WG + tid] += red[i * WG + tid + s]; }
        if (NORM) { redSq[tid] += redSq[tid + s]; }
      }
      workgroupBarrier();
    }
    let m = m0 + tid;
    if (tid < MT && m < p.M) {
      var v = red[tid * WG];
      if (NORM) { v *= inverseSqrt(redSq[0][tid] / f32(p.K) + p.eps); }
      if (GATE != 0u) {
        for (var j = 0u; j < 2u; j++) {
          let n = n0 + j;
          if (n < p.N) { store(m, n, act(finish(m, 0u, n, v[j])) * finish(m, 1u, n, v[2u + j])); }
        }
      } else if (ROPE_P > 0u) { // ROPE_P = 2: columns j and j + 2 are a pair
        for (var j = 0u; j < 4u; j++) {
          if (n0 + j < p.N) { ropeOut(m, n0 + j, v[j], v[(j + 2u) % 4u]); }
        }
      } else {
        for (var j = 0u; j < 4u; j++) {
          let n = n0 + j;
          if (n < p.N) {
            let s = segOf(n);
            store(m, n, finish(m, s, n - p.seg[s].base, v[j]));
          }
        }
      }
    }
    workgroupBarrier(); // red is reused by the next pass
  }
}
