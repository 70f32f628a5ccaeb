// Attention backward, key side, "rows" variant (see rows_forward.wgsl): one thread per (key, kv-head) sums over
// queries j <= i < j + window of its sequence and the group's heads: dv_j = sum P do_i, dk_j = scale sum P (do_i.v_j - Di) q_i,
// with P = exp(scale q_i.k_j - lse_i) and Di from attention_backward_dq_rows. No workgroup memory, no barriers.
// Training layout: B sequences of T tokens; q, do (B*T, H, D); k, v (B, T, KV, D).
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
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

// SwiftShader reads a private array at a loop variable with a per-lane gather, at a constant index directly; so the
// per-key loops over D are written out as 64 calls with constant indices (those at i >= D4 fold away), which
// is faster there and gives the same results bit for bit.
fn qk(i: u32, qb: u32) -> f32 { if (i < D4) { return dot(q[qb + i], kr[i]); } return 0.0; }
fn dov(i: u32, qb: u32) -> f32 { if (i < D4) { return dot(dout[qb + i], vr[i]); } return 0.0; }
fn kvAdd(i: u32, qb: u32, pr: f32, ds: f32) { if (i < D4) { dvAcc[i] += pr * dout[qb + i]; dkAcc[i] += ds * q[qb + i]; } }

@compute @workgroup_size(WG)
fn attention_backward_dkv_rows(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let r = gid.x + gid.y * nwg.x * WG; // row = key token * KV + kv-head
  if (r >= p.b * p.t * p.kv) { return; }
  let j = r / p.kv;
  let kvh = r % p.kv;
  let seqEnd = (j / p.t + 1u) * p.t; // the sequence's last token + 1
  let end = select(seqEnd, j + p.window, p.window < seqEnd - j); // queries that see key j
  let g = p.h / p.kv;
  let kb = r * D4;
  for (var d = 0u; d < D4; d++) { kr[d] = k[kb + d] * p.scale; vr[d] = v[kb + d]; dkAcc[d] = vec4f(); dvAcc[d] = vec4f(); }
  for (var i = j; i < end; i++) {
    for (var hh = kvh * g; hh < (kvh + 1u) * g; hh++) {
      let row = i * p.h + hh;
      let qb = row * D4;
      let s =
        qk(0u, qb) + qk(1u, qb) + qk(2u, qb) + qk(3u, qb) + qk(4u, qb) + qk(5u, qb) + qk(6u, qb) + qk(7u, qb) +
        qk(8u, qb) + qk(9u, qb) + qk(10u, qb) + qk(11u, qb) + qk(12u, qb) + qk(13u, qb) + qk(14u, qb) + qk(15u, qb) +
        qk(16u, qb) + qk(17u, qb) + qk(18u, qb) + qk(19u, qb) + qk(20u, qb) + qk(21u, qb) + qk(22u, qb) + qk(23u, qb) +
        qk(24u, qb) + qk(25u, qb) + qk(26u, qb) + qk(27u, qb) + qk(28u, qb) + qk(29u, qb) + qk(30u, qb) + qk(31u, qb) +
        qk(32u, qb) + qk(33u, qb) + qk(34u, qb) + qk(35u, qb) + qk(36u, qb) + qk(37u, qb) + qk(38u, qb) + qk(39u, qb) +
        qk(40u, qb) + qk(41u, qb) + qk(42u, qb) + qk(43u, qb) + qk(44u, qb) + qk(45u, qb) + qk(46u, qb) + qk(47u, qb) +
        qk(48u, qb) + qk(49u, qb) + qk(50u, qb) + qk(51u, qb) + qk(52u, qb) + qk(53u, qb) + qk(54u, qb) + qk(55u, qb) +
        qk(56u, qb) + qk(57u, qb) + qk(58u, qb) + qk(59u, qb) + qk(60u, qb) + qk(61u, qb) + qk(62u, qb) + qk(63u, qb);
      let dp =
        dov(0u, qb) + dov(1u, qb) + dov(2u, qb) + dov(3u, qb) + dov(4u, qb) + dov(5u, qb) + dov(6u, qb) + dov(7u, qb) +
        dov(8u, qb) + dov(9u, qb) + dov(10u, qb) + dov(11u, qb) + dov(12u, qb) + dov(13u, qb) + dov(14u, qb) + dov(15u, qb) +
        dov(16u, qb) + dov(17u, qb) + dov(18u, qb) + dov(19u, qb) + dov(20u, qb) + dov(21u, qb) + dov(22u, qb) + dov(23u, qb) +
        dov(24u, qb) + dov(25u, qb) + dov(26u, qb) + dov(27u, qb) + dov(28u, qb) + dov(29u, qb) + dov(30u, qb) + dov(31u, qb) +
        dov(32u, qb) + dov(33u, qb) + dov(34u, qb) + dov(35u, qb) + dov(36u, qb) + dov(37u, qb) + dov(38u, qb) + dov(39u, qb) +
        dov(40u, qb) + dov(41u, qb) + dov(42u, qb) + dov(43u, qb) + dov(44u, qb) + dov(45u, qb) + dov(46u, qb) + dov(47u, qb) +
        dov(48u, qb) + dov(49u, qb) + dov(50u, qb) + dov(51u, qb) + dov(52u, qb) + dov(53u, qb) + dov(54u, qb) + dov(55u, qb) +
        dov(56u, qb) + dov(57u, qb) + dov(58u, qb) + dov(59u, qb) + dov(60u, qb) + dov(61u, qb) + dov(62u, qb) + dov(63u, qb);
      let pr = exp(s - lse[row]);
      let ds = pr * (dp - delta[row]);
      kvAdd(0u, qb, pr, ds); kvAdd(1u, qb, pr, ds); kvAdd(2u, qb, pr, ds); kvAdd(3u, qb, pr, ds); kvAdd(4u, qb, pr, ds); kvAdd(5u, qb, pr, ds); kvAdd(6u, qb, pr, ds); kvAdd(7u, qb, pr, ds);
      kvAdd(8u, qb, pr, ds); kvAdd(9u, qb, pr, ds); kvAdd(10u, qb, pr, ds); kvAdd(11u, qb, pr, ds); kvAdd(12u, qb, pr, ds); kvAdd(13u, qb, pr, ds); kvAdd(14u, qb, pr, ds); kvAdd(15u, qb, pr, ds);
      kvAdd(16u, qb, pr, ds); kvAdd(17u, qb, pr, ds); kvAdd(18u, qb, pr, ds); kvAdd(19u, qb, pr, ds); kvAdd(20u, qb, pr, ds); kvAdd(21u, qb, pr, ds); kvAdd(22u, qb, pr, ds); kvAdd(23u, qb, pr, ds);
      kvAdd(24u, qb, pr, ds); kvAdd(25u, qb, pr, ds); kvAdd(26u, qb, pr, ds); kvAdd(27u, qb, pr, ds); kvAdd(28u, qb, pr, ds); kvAdd(29u, qb, pr, ds); kvAdd(30u, qb, pr, ds); kvAdd(31u, qb, pr, ds);
      kvAdd(32u, qb, pr, ds); kvAdd(33u, qb, pr, ds); kvAdd(34u, qb, pr, ds); kvAdd(35u, qb, pr, ds); kvAdd(36u, qb, pr, ds); kvAdd(37u, qb, pr, ds); kvAdd(38u, qb, pr, ds); kvAdd(39u, qb, pr, ds);
      kvAdd(40u, qb, pr, ds); kvAdd(41u, qb, pr, ds); kvAdd(42u, qb, pr, ds); kvAdd(43u, qb, pr, ds); kvAdd(44u, qb, pr, ds); kvAdd(45u, qb, pr, ds); kvAdd(46u, qb, pr, ds); kvAdd(47u, qb, pr, ds);
      kvAdd(48u, qb, pr, ds); kvAdd(49u, qb, pr, ds); kvAdd(50u, qb, pr, ds); kvAdd(51u, qb, pr, ds); kvAdd(52u, qb, pr, ds); kvAdd(53u, qb, pr, ds); kvAdd(54u, qb, pr, ds); kvAdd(55u, qb, pr, ds);
      kvAdd(56u, qb, pr, ds); kvAdd(57u, qb, pr, ds); kvAdd(58u, qb, pr, ds); kvAdd(59u, qb, pr, ds); kvAdd(60u, qb, pr, ds); kvAdd(61u, qb, pr, ds); kvAdd(62u, qb, pr, ds); kvAdd(63u, qb, pr, ds);
    }
  }
  for (var d = 0u; d < D4; d++) { dk[kb + d] = dkAcc[d] * p.scale; dv[kb + d] = dvAcc[d]; }
}
