// Attention backward, key side, "rows" variant (see rows_forward.wgsl): one thread per (key, kv-head) sums over
// queries i >= j of its sequence and the group's heads: dv_j = sum P do_i, dk_j = scale sum P (do_i.v_j - Di) q_i,
// with P = exp(scale q_i.k_j - lse_i) and Di from attention_backward_dq_rows. No workgroup memory, no barriers.
// Training layout: B sequences of T tokens; q, do (B*T, H, D); k, v (B, T, KV, D).
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (B*T, H, D)
@group(0) @binding(2) var<storage, read> k: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(3) var<storage, read> v: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(4) var<storage, read> dout: array<vec4f>; // (B*T, H, D)
@group(0) @binding(5) var<storage, read> lse: array<f32>; // (B*T, H)
@group(0) @binding(6) var<storage, read> delta: array<f32>; // (B*T, H)
@group(0) @binding(7) var<storage, read_write> dk: array<vec4f>; // (B, T, KV, D)
@group(0) @binding(8) var<storage, read_write> dv: array<vec4f>; // (B, T, KV, D)

override D: u32 = 64; // a multiple of 4, <= 256
override WG: u32 = 64;
override D4 = D / 4u; // vec4 per row (D % 4 == 0)

var<private> kr: array<vec4f, 64>;
var<private> vr: array<vec4f, 64>;
var<private> dkAcc: array<vec4f, 64>;
var<private> dvAcc: array<vec4f, 64>;

@compute @workgroup_size(WG)
fn attention_backward_dkv_rows(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let r = gid.x + gid.y * nwg.x * WG; // row = key token * KV + kv-head
  if (r >= p.b * p.t * p.kv) { return; }
  let j = r / p.kv;
  let kvh = r % p.kv;
  let end = (j / p.t + 1u) * p.t; // the sequence's last token + 1
  let g = p.h / p.kv;
  let kb = r * D4;
  for (var d = 0u; d < D4; d++) { kr[d] = k[kb + d] * p.scale; vr[d] = v[kb + d]; dkAcc[d] = vec4f(); dvAcc[d] = vec4f(); }
  for (var i = j; i < end; i++) {
    for (var hh = kvh * g; hh < (kvh + 1u) * g; hh++) {
      let row = i * p.h + hh;
      let qb = row * D4;
      var s = 0.0;
      var dp = 0.0;
      for (var d = 0u; d < D4; d++) { s += dot(q[qb + d], kr[d]); dp += dot(dout[qb + d], vr[d]); }
      let pr = exp(s - lse[row]);
      let ds = pr * (dp - delta[row]);
      for (var d = 0u; d < D4; d++) { dvAcc[d] += pr * dout[qb + d]; dkAcc[d] += ds * q[qb + d]; }
    }
  }
  for (var d = 0u; d < D4; d++) { dk[kb + d] = dkAcc[d] * p.scale; dv[kb + d] = dvAcc[d]; }
}
