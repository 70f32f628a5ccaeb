// Attention backward, key side (FlashAttention-2): a workgroup owns BK keys of one sequence and kv-head, walks
// the query tiles at or after them over all H / KV heads of the group (so the GQA sum needs no atomics) and
// accumulates dv = sum_i P_i do_i and dk = scale sum_i P_i (do_i.v - Di) q_i, with P = exp(scale q.k - lse).
// Training layout: B sequences of T tokens; q, do (B*T, H, D); k, v, dk, dv (B, T, KV, D); lse, Di (B*T, H).
// Under a sliding window only queries t < j + window see key j.
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec2f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec2f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec2f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> dout: array<vec2f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(6) var<storage, read> delta: array<f32>; // (B*T, H), from attention_backward_dq
@group(0) @binding(7) var<storage, read_write> dk: array<vec2f>; // (B, T, KV, D)
@group(0) @binding(8) var<storage, read_write> dv: array<vec2f>; // (B, T, KV, D)

override D: u32 = 64;
override BK: u32 = 16; // keys per workgroup
override BQ: u32 = 4; // query tokens per tile
override GH: u32 = 4; // query heads per tile, a divisor of H / KV
override WG: u32 = 64;
override R = BQ * GH;
override D4 = (D + 3u) / 4u; // vec4 per row in workgroup memory, zero-padded past D
override KS = D4 + 1u; // padded K/V row against bank conflicts
override NACC = (BK * D4 + WG - 1u) / WG; // vec4 of dk (and of dv) per thread (<= ACC)
const ACC = 4u;

var<workgroup> ks: array<vec4f, BK * KS>;
var<workgroup> vs: array<vec4f, BK * KS>;
var<workgroup> qs: array<vec4f, R * D4>;
var<workgroup> dos: array<vec4f, R * D4>;
var<workgroup> ps: array<f32, R * BK>; // P
var<workgroup> ds: array<f32, R * BK>; // dS = P (dP - Di)
var<workgroup> rowLse: array<f32, R>;
var<workgroup> rowDelta: array<f32, R>;

// Elements 4 * d4 .. 4 * d4 + 3 of the row at vec2 index `at` of q, k, v or dout (src 0..3); 0 past D.
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
        default: { y = dout[i]; }
      }
      x[2u * h] = y.x;
      x[2u * h + 1u] = y.y;
    }
  }
  return x;
}

@compute @workgroup_size(WG)
fn attention_backward_dkv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let nkb = (p.t + BK - 1u) / BK;
  let b = wid.x / nkb;
  let j0 = wid.x % nkb * BK;
  let kvh = wid.y;
  let g = p.h / p.kv;
  for (var e = tid; e < BK * D4; e += WG) {
    var x = vec4f(0.0);
    var y = vec4f(0.0);
    if (j0 + e / D4 < p.t) {
      let at = ((b * p.t + j0 + e / D4) * p.kv + kvh) * D / 2u;
      x = load4(1u, at, e % D4);
      y = load4(2u, at, e % D4);
    }
    ks[e / D4 * KS + e % D4] = x;
    vs[e / D4 * KS + e % D4] = y;
  }
  var accK: array<vec4f, ACC>;
  var accV: array<vec4f, ACC>;
  // The query tiles that can see one of keys j0..j0 + BK - 1: from the key on, up to the last key's window.
  let tEnd = select(p.t, min(p.t, j0 + BK - 1u + p.window), p.window < p.t);
  for (var t0 = j0 / BQ * BQ; t0 < tEnd; t0 += BQ) {
    for (var hs = 0u; hs < g; hs += GH) {
      let h0 = kvh * g + hs;
      workgroupBarrier(); // the previous tile is consumed
      for (var e = tid; e < R * D4; e += WG) {
        let t = t0 + e / D4 / GH;
        var x = vec4f(0.0);
        var y = vec4f(0.0);
        if (t < p.t) {
          let at = ((b * p.t + t) * p.h + h0 + e / D4 % GH) * D / 2u;
          x = load4(0u, at, e % D4);
          y = load4(3u, at, e % D4);
        }
        qs[e] = x;
        dos[e] = y;
      }
      for (var r = tid; r < R; r += WG) {
        let t = t0 + r / GH;
        var l = 0.0;
        var di = 0.0;
        if (t < p.t) {
          l = lse[(b * p.t + t) * p.h + h0 + r % GH];
          di = delta[(b * p.t + t) * p.h + h0 + r % GH];
        }
        rowLse[r] = l;
        rowDelta[r] = di;
      }
      workgroupBarrier();
      for (var e = tid; e < R * BK; e += WG) {
        let r = e / BK;
        let j = e % BK;
        let t = t0 + r / GH;
        var pr = 0.0;
        var dsv = 0.0;
        if (t < p.t && j0 + j <= t && t - (j0 + j) < p.window) {
          var s = 0.0;
          var dp = 0.0;
          for (var d = 0u; d < D4; d++) {
            s += dot(qs[r * D4 + d], ks[j * KS + d]);
            dp += dot(dos[r * D4 + d], vs[j * KS + d]);
          }
          pr = exp(s * p.scale - rowLse[r]);
          dsv = pr * (dp - rowDelta[r]);
        }
        ps[e] = pr;
        ds[e] = dsv;
      }
      workgroupBarrier();
      for (var i = 0u; i < NACC; i++) {
        let e = tid + i * WG;
        if (e < BK * D4) {
          var ak = accK[i];
          var av = accV[i];
          for (var r = 0u; r < R; r++) {
            ak += ds[r * BK + e / D4] * qs[r * D4 + e % D4];
            av += ps[r * BK + e / D4] * dos[r * D4 + e % D4];
          }
          accK[i] = ak;
          accV[i] = av;
        }
      }
    }
  }
  for (var i = 0u; i < NACC; i++) {
    let e = tid + i * WG;
    if (e < BK * D4 && j0 + e / D4 < p.t) {
      let at = ((b * p.t + j0 + e / D4) * p.kv + kvh) * D / 2u + 2u * (e % D4);
      dk[at] = accK[i].xy * p.scale;
      dv[at] = accV[i].xy;
      if (4u * (e % D4) + 2u < D) {
        dk[at + 1u] = accK[i].zw * p.scale;
        dv[at + 1u] = accV[i].zw;
      }
    }
  }
}
