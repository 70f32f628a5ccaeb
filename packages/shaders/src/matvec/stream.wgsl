// Decode matvec, stream variant (same contract, fused options and epilogue as forward.wgsl), built for a GPU's
// memory bandwidth: every load of W is 16 bytes (8 bf16/f16 or 4 f32 elements), T threads read one output column's
// row (and under GATE its up row) along K, and a workgroup of G such groups owns G columns, so even a projection of
// 896 outputs keeps thousands of threads with several loads each in flight. Needs every row of W to start on 16
// bytes (K and the segments' offsets multiples of 8 halves or 4 floats): index.ts runs the workgroup variant
// otherwise. Parameters, bindings and the epilogue: common.wgsl (appended).
@group(0) @binding(2) var<storage, read> w: array<vec4u>; // 4 f32, or 8 bf16/f16, a vector
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override T: u32 = 32u; // threads a column (a power of two)
override G: u32 = 8u; // columns a workgroup
override MT: u32 = 4u; // rows of x per pass, 1..4
override NORM: bool = false;
override GATE: u32 = 0u; // 0 none, 1 silu, 2 GELU tanh: y = act(seg 0) * seg 1

var<workgroup> red: array<vec2f, 4u * T * G>; // (MT, G·T): partial sums of the column's row (x) and up row (y)
var<workgroup> redSq: array<f32, 4u * T * G>; // NORM: partial Σ x² of each row of x

// Elements 0-3 (hi = false) or 4-7 of a 16-byte vector of W (f32: only 0-3 exist).
fn half4(v: vec4u, hi: bool) -> vec4f {
  let a = select(v.xy, v.zw, hi);
  if (W_KIND == 1u) {
    return vec4f(bitcast<f32>(a.x << 16u), bitcast<f32>(a.x & 0xffff0000u), bitcast<f32>(a.y << 16u),
                 bitcast<f32>(a.y & 0xffff0000u));
  }
  return vec4f(unpack2x16float(a.x), unpack2x16float(a.y));
}

// Four consecutive elements of x from offset e (scalar loads: x has no alignment promise).
fn x4(e: u32) -> vec4f {
  return vec4f(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
}

@compute @workgroup_size(T * G)
fn matvec_forward_stream(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u,
                         @builtin(num_workgroups) nwg: vec3u) {
  let first = (wid.x + wid.y * nwg.x) * G;
  if (first >= p.N) { return; } // whole workgroup: grid padding
  let tid = lid.x;
  let g = tid / T;
  let t = tid % T;
  let n = first + g;
  let nc = min(n, p.N - 1u); // columns past N load a valid row; their sums are dropped
  let E = select(8u, 4u, W_KIND == 0u); // elements a vector
  let r0 = rowOf(nc, false) / E; // vector index of the row's start
  let r1 = select(r0, rowOf(nc, true) / E, GATE != 0u);
  let TG = T * G;
  for (var m0 = 0u; m0 < p.M; m0 += MT) {
    let xr = p.offX + vec4u(m0, min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.ldx;
    var a = array<vec4f, 4>(vec4f(), vec4f(), vec4f(), vec4f()); // row m0 + i · the column's row
    var b = array<vec4f, 4>(vec4f(), vec4f(), vec4f(), vec4f()); // GATE: row m0 + i · the up row
    var sq = vec4f();
    for (var k = t * E; k < p.K; k += T * E) {
      let q = k / E;
      let v0 = w[r0 + q];
      var v1 = vec4u();
      if (GATE != 0u) { v1 = w[r1 + q]; }
      for (var h = 0u; h < E / 4u; h++) {
        let kk = k + 4u * h;
        let hi = h == 1u;
        var w0 = select(half4(v0, hi), bitcast<vec4f>(v0), W_KIND == 0u);
        var w1 = vec4f();
        if (GATE != 0u) { w1 = select(half4(v1, hi), bitcast<vec4f>(v1), W_KIND == 0u); }
        if (NORM) {
          let nv = vec4f(nw[kk], nw[kk + 1u], nw[kk + 2u], nw[kk + 3u]);
          w0 *= nv;
          w1 *= nv;
        }
        for (var i = 0u; i < MT; i++) {
          let xv = x4(xr[i] + kk);
          a[i] += xv * w0;
          if (GATE != 0u) { b[i] += xv * w1; }
          if (NORM) { sq[i] += dot(xv, xv); }
        }
      }
    }
    for (var i = 0u; i < MT; i++) {
      red[i * TG + tid] = vec2f(dot(a[i], vec4f(1.0)), dot(b[i], vec4f(1.0)));
      if (NORM) { redSq[i * TG + tid] = sq[i]; }
    }
    workgroupBarrier();
    for (var s = T / 2u; s > 0u; s >>= 1u) {
      if (t < s) {
        for (var i = 0u; i < MT; i++) {
          red[i * TG + tid] += red[i * TG + tid + s];
          if (NORM) { redSq[i * TG + tid] += redSq[i * TG + tid + s]; }
        }
      }
      workgroupBarrier();
    }
    let m = m0 + t;
    if (t < MT && m < p.M && n < p.N) {
      var v = red[t * TG + g * T];
      if (NORM) { v *= inverseSqrt(redSq[t * TG + g * T] / f32(p.K) + p.eps); }
      if (GATE != 0u) {
        store(m, n, act(finish(m, 0u, n, v.x)) * finish(m, 1u, n, v.y));
      } else {
        let s = select(0u, 1u, n >= p.seg[1].base) + select(0u, 1u, n >= p.seg[2].base);
        store(m, n, finish(m, s, n - p.seg[s].base, v.x));
      }
    }
    workgroupBarrier(); // red is reused by the next pass
  }
}
