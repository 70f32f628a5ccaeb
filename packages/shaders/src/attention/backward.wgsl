// Attention backward, query side (FlashAttention-2): a workgroup takes BQ query tokens x GH heads of one sequence
// (R = BQ * GH rows), recomputes P = exp(scale q.k - lse) tile by tile and accumulates
// dq = scale sum_j P_j (do.v_j - Di) k_j. It also writes Di = rowsum(do * o) for attention_backward_dkv.
// Training layout: B sequences of T tokens; q, o, do (B*T, H, D); k, v (B, T, KV, D); causal within a sequence,
// and within `window` keys of the query under a sliding window.
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec2f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec2f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec2f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> o: array<vec2f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> dout: array<vec2f>; // (B*T, H, D)
@group(0) @binding(6) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(7) var<storage, read_write> dq: array<vec2f>; // (B*T, H, D)
@group(0) @binding(8) var<storage, read_write> delta: array<f32>; // (B*T, H)

override D: u32 = 64;
override BQ: u32 = 4; // query tokens per workgroup
override GH: u32 = 4; // query heads per workgroup, a divisor of H / KV
override BK: u32 = 16; // keys per tile
override WG: u32 = 64;
override R = BQ * GH;
override D4 = (D + 3u) / 4u; // vec4 per row in workgroup memory, zero-padded past D
override KS = D4 + 1u; // padded K/V tile row against bank conflicts
override NACC = (R * D4 + WG - 1u) / WG; // vec4 of dq per thread (<= ACC)
const ACC = 4u;

var<workgroup> qs: array<vec4f, R * D4>;
var<workgroup> dos: array<vec4f, R * D4>;
var<workgroup> ks: array<vec4f, BK * KS>;
var<workgroup> vs: array<vec4f, BK * KS>;
var<workgroup> ds: array<f32, R * BK>; // dS = P (dP - Di)
var<workgroup> rowLse: array<f32, R>;
var<workgroup> rowDelta: array<f32, R>;

// Elements 4 * d4 .. 4 * d4 + 3 of the row at vec2 index `at` of q, k, v, o or dout (src 0..4); 0 past D.
fn load4(src: u32, at: u32, d4: u32) -> vec4f {
  var x = vec4f(0.0);
  for (var h = 0u; h < 2u; h++) {
    let i = at + 2u * d4 + h;
    if (4u * d4 + 2u * h < D) {
      var y: vec2f;
      switch (src) {
        case 0u: { y = q[i]; }
        case 1u: { y = k[i]; }
        case 2u: { y = v[i]; }
        case 3u: { y = o[i]; }
        default: { y = dout[i]; }
      }
      x[2u * h] = y.x;
      x[2u * h + 1u] = y.y;
    }
  }
  return x;
}

@compute @workgroup_size(WG)
fn attention_backward_dq(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let nqb = (p.t + BQ - 1u) / BQ;
  let b = wid.x / nqb;
  let t0 = wid.x % nqb * BQ;
  let h0 = wid.y * GH;
  let kvh = h0 / (p.h / p.kv);
  for (var e = tid; e < R * D4; e += WG) {
    let t = t0 + e / D4 / GH;
    var x = vec4f(0.0);
    var g = vec4f(0.0);
    if (t < p.t) {
      let at = ((b * p.t + t) * p.h + h0 + e / D4 % GH) * D / 2u;
      x = load4(0u, at, e % D4);
      g = load4(4u, at, e % D4);
    }
    qs[e] = x;
    dos[e] = g;
  }
  workgroupBarrier();
  for (var r = tid; r < R; r += WG) {
    let t = t0 + r / GH;
    var di = 0.0;
    var l = 0.0;
    if (t < p.t) {
      let row = (b * p.t + t) * p.h + h0 + r % GH;
      for (var d = 0u; d < D4; d++) { di += dot(dos[r * D4 + d], load4(3u, row * D / 2u, d)); }
      l = lse[row];
      delta[row] = di;
    }
    rowDelta[r] = di;
    rowLse[r] = l;
  }
  var acc: array<vec4f, ACC>;
  let kStart = select(0u, t0 + 1u - p.window, t0 + 1u > p.window); // the first query's window starts lowest
  for (var k0 = kStart; k0 < min(t0 + BQ, p.t); k0 += BK) {
    workgroupBarrier(); // the previous tile is consumed (and rowLse/rowDelta written)
    for (var e = tid; e < BK * D4; e += WG) {
      let key = k0 + e / D4;
      var x = vec4f(0.0);
      var y = vec4f(0.0);
      if (key < p.t) {
        let at = ((b * p.t + key) * p.kv + kvh) * D / 2u;
        x = load4(1u, at, e % D4);
        y = load4(2u, at, e % D4);
      }
      ks[e / D4 * KS + e % D4] = x;
      vs[e / D4 * KS + e % D4] = y;
    }
    workgroupBarrier();
    for (var e = tid; e < R * BK; e += WG) {
      let r = e / BK;
      let j = e % BK;
      var g = 0.0;
      let tq = t0 + r / GH;
      if (tq < p.t && k0 + j <= tq && tq - (k0 + j) < p.window) {
        var s = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < D4; d++) {
          s += dot(qs[r * D4 + d], ks[j * KS + d]);
          dp += dot(dos[r * D4 + d], vs[j * KS + d]);
        }
        g = exp(s * p.scale - rowLse[r]) * (dp - rowDelta[r]);
      }
      ds[e] = g;
    }
    workgroupBarrier();
    for (var i = 0u; i < NACC; i++) {
      let e = tid + i * WG;
      if (e < R * D4) {
        var a = acc[i];
        for (var j = 0u; j < BK; j++) { a += ds[e / D4 * BK + j] * ks[j * KS + e % D4]; }
        acc[i] = a;
      }
    }
  }
  for (var i = 0u; i < NACC; i++) {
    let e = tid + i * WG;
    let t = t0 + e / D4 / GH;
    if (e < R * D4 && t < p.t) {
      let at = ((b * p.t + t) * p.h + h0 + e / D4 % GH) * D / 2u + 2u * (e % D4);
      dq[at] = acc[i].xy * p.scale;
      if (4u * (e % D4) + 2u < D) { dq[at + 1u] = acc[i].zw * p.scale; }
    }
  }
}
