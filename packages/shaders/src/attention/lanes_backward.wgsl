// Attention backward, query side, "lanes" variant (same contract as attention_backward_dq): a workgroup takes BQ
// query tokens x GH heads of one sequence, P adjacent lanes of a subgroup per (token, head) row, lane `part` holding
// vec4 part, part + P, ... of the row's q, do and dq (NV each). K and V tiles of BK keys are shared through workgroup
// memory; each key's score and do.v are P partial dots summed by subgroupShuffleXor, so dS stays in registers:
// dq = scale sum_j P_j (do.v_j - Di) k_j with P = exp(scale q.k - lse). It also writes Di = rowsum(do * o).
// Training layout: B sequences of T tokens; q, o, do (B*T, H, D); k, v (B, T, KV, D); causal within a sequence,
// and within `window` keys of the query under a sliding window.
enable subgroups;
diagnostic(off, subgroup_uniformity); // every lane of a row runs the same shuffles; rows differ only in what they keep

struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> o: array<vec4f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> dout: array<vec4f>; // (B*T, H, D)
@group(0) @binding(6) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(7) var<storage, read_write> dq: array<vec4f>; // (B*T, H, D)
@group(0) @binding(8) var<storage, read_write> delta: array<f32>; // (B*T, H)

override D: u32 = 64;
override BQ: u32 = 4; // query tokens per workgroup
override GH: u32 = 4; // query heads per workgroup, a divisor of H / KV
override BK: u32 = 32; // keys per tile
override P: u32 = 4; // lanes per row: a power of two, at most the device's smallest subgroup
override WG = BQ * GH * P;
override D4 = D / 4u;
override NV = D4 / P; // vec4 of a row per lane (<= MAXNV)
const MAXNV = 16u;

var<workgroup> ks: array<vec4f, BK * D4>;
var<workgroup> vs: array<vec4f, BK * D4>;


@compute @workgroup_size(WG)
fn attention_backward_dq_lanes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let nqb = (p.t + BQ - 1u) / BQ;
  let b = wid.x / nqb;
  let t0 = wid.x % nqb * BQ;
  let h0 = wid.y * GH;
  let kvh = h0 / (p.h / p.kv);
  let part = tid % P;
  let t = t0 + tid / P / GH; // this row's token
  let row = (b * p.t + t) * p.h + h0 + tid / P % GH;
  let ob = row * D4 + part; // this lane's first vec4 of q, o, do and dq
  let valid = t < p.t;
  var qr: array<vec4f, MAXNV>;
  var dr: array<vec4f, MAXNV>;
  var acc: array<vec4f, MAXNV>;
  var di = 0.0;
  var l = 0.0;
  if (valid) {
    for (var c = 0u; c < NV; c++) {
      qr[c] = q[ob + c * P];
      dr[c] = dout[ob + c * P];
      di += dot(dr[c], o[ob + c * P]);
    }
    l = lse[row];
  }
  di = rowSum(di);
  if (valid && part == 0u) { delta[row] = di; }
  let kStart = select(0u, t0 + 1u - p.window, t0 + 1u > p.window); // the first query's window starts lowest
  let kEnd = min(t0 + BQ, p.t);
  for (var k0 = kStart; k0 < kEnd; k0 += BK) {
    workgroupBarrier(); // the previous tile is consumed
    stageKv(b * p.t, k0, kEnd, kvh, tid);
    workgroupBarrier();
    for (var j = 0u; j < BK; j++) {
      var s = 0.0;
      var dp = 0.0;
      for (var c = 0u; c < NV; c++) {
        s += dot(qr[c], ks[j * D4 + part + c * P]);
        dp += dot(dr[c], vs[j * D4 + part + c * P]);
      }
      s = rowSum(s);
      dp = rowSum(dp);
      let key = k0 + j;
      let g = select(0.0, exp(s * p.scale - l) * (dp - di), valid && key <= t && t - key < p.window);
      for (var c = 0u; c < NV; c++) { acc[c] += g * ks[j * D4 + part + c * P]; }
    }
  }
  if (valid) {
    for (var c = 0u; c < NV; c++) { dq[ob + c * P] = acc[c] * p.scale; }
  }
}
