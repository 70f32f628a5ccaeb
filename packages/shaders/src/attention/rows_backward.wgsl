// Attention backward, "rows" variant (see rows_forward.wgsl): no workgroup memory, no barriers.
// One thread per (token, head) writes Di = rowsum(do * o) and
//   dq = scale sum_j P_j (do.v_j - Di) k_j over keys j <= t, with P_j = exp(scale q.k_j - lse).
// Training layout: B sequences of T tokens; q, o, do (B*T, H, D); k, v (B, T, KV, D); causal within a sequence.
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> o: array<vec4f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> dout: array<vec4f>; // (B*T, H, D)
@group(0) @binding(6) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(7) var<storage, read_write> dq: array<vec4f>; // (B*T, H, D)
@group(0) @binding(8) var<storage, read_write> delta: array<f32>; // (B*T, H), for the key side

override D: u32 = 64; // a multiple of 4, <= 256
override WG: u32 = 64;
override D4 = D / 4u; // vec4 per row (D % 4 == 0)

var<private> ra: array<vec4f, 64>; // q, scaled
var<private> rb: array<vec4f, 64>; // do
var<private> accA: array<vec4f, 64>; // dq

@compute @workgroup_size(WG)
fn attention_backward_dq_rows(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let r = gid.x + gid.y * nwg.x * WG; // row = token * H + head
  if (r >= p.b * p.t * p.h) { return; }
  let i = r / p.h;
  let kvh = (r % p.h) / (p.h / p.kv);
  let seq = i / p.t;
  let t = i % p.t;
  let ob = r * D4;
  var di = 0.0;
  for (var d = 0u; d < D4; d++) {
    ra[d] = q[ob + d] * p.scale;
    rb[d] = dout[ob + d];
    di += dot(rb[d], o[ob + d]);
    accA[d] = vec4f();
  }
  let l = lse[r];
  for (var j = 0u; j <= t; j++) {
    let kb = ((seq * p.t + j) * p.kv + kvh) * D4;
    var s = 0.0;
    var dp = 0.0;
    for (var d = 0u; d < D4; d++) { s += dot(ra[d], k[kb + d]); dp += dot(rb[d], v[kb + d]); }
    let ds = exp(s - l) * (dp - di);
    for (var d = 0u; d < D4; d++) { accA[d] += ds * k[kb + d]; }
  }
  for (var d = 0u; d < D4; d++) { dq[ob + d] = accA[d] * p.scale; }
  delta[r] = di;
}
