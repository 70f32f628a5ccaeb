// Attention backward, key side, "lanes" variant (same contract as attention_backward_dkv): a workgroup owns BK keys
// of one sequence and kv-head, P adjacent lanes of a subgroup per key, lane `part` holding vec4 part, part + P, ...
// of the key's k, v, dk and dv (NV each); QG groups of such lanes split each tile's rows and add their sums at the
// end through workgroup memory. The first keys of a sequence see every later query of every head of their group:
// the groups shorten that longest walk QG times. Tiles of BQ query tokens x GH heads (q, do, lse and Di) are shared
// through workgroup memory, walking every head of the group (so the GQA sum needs no atomics). Each (query, key)
// score and do.v are P partial dots summed by subgroupShuffleXor: dv = sum_i P_i do_i and
// dk = scale sum_i P_i (do_i.v - Di) q_i, with P = exp(scale q.k - lse). Training layout: B sequences of T tokens;
// q, do (B*T, H, D); k, v, dk, dv (B, T, KV, D); lse, Di (B*T, H). Under a sliding window only queries
// t < j + window see key j.
enable subgroups;
diagnostic(off, subgroup_uniformity); // every lane of a key runs the same shuffles; keys differ only in what they keep

struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> dout: array<vec4f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(6) var<storage, read> delta: array<f32>; // (B*T, H), from attention_backward_dq
@group(0) @binding(7) var<storage, read_write> dk: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(8) var<storage, read_write> dv: array<vec4f>; // (B, T, KV, D)

override D: u32 = 64;
override BK: u32 = 32; // keys per workgroup
override BQ: u32 = 4; // query tokens per tile
override GH: u32 = 4; // query heads per tile, a divisor of H / KV
override P: u32 = 4; // lanes per key: a power of two, at most the device's smallest subgroup
override QG: u32 = 1; // groups of lanes that split each tile's rows
override WG = BK * P * QG;
override R = BQ * GH; // query rows per tile
override D4 = D / 4u;
override NV = D4 / P; // vec4 of a row per lane (<= MAXNV)
const MAXNV = 16u;

var<workgroup> qs: array<vec4f, R * D4>;
var<workgroup> dos: array<vec4f, R * D4>;
var<workgroup> rowLse: array<f32, R>;
var<workgroup> rowDelta: array<f32, R>;
var<workgroup> red: array<vec4f, select(1u, 2u * BK * D4, QG > 1u)>; // one group's dk and dv sums at a time


@compute @workgroup_size(WG)
fn attention_backward_dkv_lanes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let nkb = (p.t + BK - 1u) / BK;
  let b = wid.x / nkb;
  let j0 = wid.x % nkb * BK;
  let kvh = wid.y;
  let g = p.h / p.kv;
  let part = tid % P;
  let group = tid / (BK * P);
  let key = j0 + tid / P % BK;
  let valid = key < p.t;
  let kb = ((b * p.t + key) * p.kv + kvh) * D4 + part; // this lane's first vec4 of k, v, dk and dv
  var kr: array<vec4f, MAXNV>;
  var vr: array<vec4f, MAXNV>;
  var accK: array<vec4f, MAXNV>;
  var accV: array<vec4f, MAXNV>;
  if (valid) {
    for (var c = 0u; c < NV; c++) {
      kr[c] = k[kb + c * P];
      vr[c] = v[kb + c * P];
    }
  }
  // The query tiles that can see one of keys j0..j0 + BK - 1: from the key on, up to the last key's window.
  let tEnd = select(p.t, min(p.t, j0 + BK - 1u + p.window), p.window < p.t);
  for (var t0 = j0; t0 < tEnd; t0 += BQ) {
    for (var hs = 0u; hs < g; hs += GH) {
      let h0 = kvh * g + hs;
      workgroupBarrier(); // the previous tile is consumed
      for (var e = tid; e < R * D4; e += WG) {
        let t = t0 + e / D4 / GH;
        var x = vec4f(0.0);
        var y = vec4f(0.0);
        if (t < p.t) {
          let at = ((b * p.t + t) * p.h + h0 + e / D4 % GH) * D4 + e % D4;
          x = q[at];
          y = dout[at];
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
      for (var r = group; r < R; r += QG) {
        var s = 0.0;
        var dp = 0.0;
        for (var c = 0u; c < NV; c++) {
          s += dot(kr[c], qs[r * D4 + part + c * P]);
          dp += dot(vr[c], dos[r * D4 + part + c * P]);
        }
        s = rowSum(s);
        dp = rowSum(dp);
        let t = t0 + r / GH;
        let ok = valid && t < p.t && key <= t && t - key < p.window;
        let pr = select(0.0, exp(s * p.scale - rowLse[r]), ok);
        let dsv = pr * (dp - rowDelta[r]);
        for (var c = 0u; c < NV; c++) {
          accK[c] += dsv * qs[r * D4 + part + c * P];
          accV[c] += pr * dos[r * D4 + part + c * P];
        }
      }
    }
  }
  // Groups 1.. add their sums into group 0's, one group at a time.
  let at = (tid % (BK * P)) * NV; // this lane's NV vec4 of a group's dk (dv: + BK * D4)
  for (var g1 = 1u; g1 < QG; g1++) {
    workgroupBarrier(); // the tiles (and the previous group's sums) are consumed
    if (group == g1) {
      for (var c = 0u; c < NV; c++) {
        red[at + c] = accK[c];
        red[BK * D4 + at + c] = accV[c];
      }
    }
    workgroupBarrier();
    if (group == 0u) {
      for (var c = 0u; c < NV; c++) {
        accK[c] += red[at + c];
        accV[c] += red[BK * D4 + at + c];
      }
    }
  }
  if (valid && group == 0u) {
    for (var c = 0u; c < NV; c++) {
      dk[kb + c * P] = accK[c] * p.scale;
      dv[kb + c * P] = accV[c];
    }
  }
}
