// Attention backward, "rows" variant (see rows_forward.wgsl): no workgroup memory, no barriers.
// One thread per (token, head) writes Di = rowsum(do * o) and
//   dq = scale sum_j P_j (do.v_j - Di) k_j over keys t - window < j <= t, with P_j = exp(scale q.k_j - lse).
// Training layout: B sequences of T tokens; q, o, do (B*T, H, D); k, v (B, T, KV, D); causal within a sequence.
struct Params { b: u32, t: u32, h: u32, kv: u32, scale: f32, window: u32 }
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

// SwiftShader reads a private array at a loop variable with a per-lane gather, at a constant index directly; so the
// per-key loops over D are written out as 64 calls with constant indices (those at i >= D4 fold away), which
// is faster there and gives the same results bit for bit.
fn qk(i: u32, kb: u32) -> f32 { if (i < D4) { return dot(ra[i], k[kb + i]); } return 0.0; }
fn dov(i: u32, kb: u32) -> f32 { if (i < D4) { return dot(rb[i], v[kb + i]); } return 0.0; }
fn dqAdd(i: u32, kb: u32, ds: f32) { if (i < D4) { accA[i] += ds * k[kb + i]; } }

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
  for (var j = select(0u, t + 1u - p.window, t + 1u > p.window); j <= t; j++) {
    let kb = ((seq * p.t + j) * p.kv + kvh) * D4;
    let s =
      qk(0u, kb) + qk(1u, kb) + qk(2u, kb) + qk(3u, kb) + qk(4u, kb) + qk(5u, kb) + qk(6u, kb) + qk(7u, kb) +
      qk(8u, kb) + qk(9u, kb) + qk(10u, kb) + qk(11u, kb) + qk(12u, kb) + qk(13u, kb) + qk(14u, kb) + qk(15u, kb) +
      qk(16u, kb) + qk(17u, kb) + qk(18u, kb) + qk(19u, kb) + qk(20u, kb) + qk(21u, kb) + qk(22u, kb) + qk(23u, kb) +
      qk(24u, kb) + qk(25u, kb) + qk(26u, kb) + qk(27u, kb) + qk(28u, kb) + qk(29u, kb) + qk(30u, kb) + qk(31u, kb) +
      qk(32u, kb) + qk(33u, kb) + qk(34u, kb) + qk(35u, kb) + qk(36u, kb) + qk(37u, kb) + qk(38u, kb) + qk(39u, kb) +
      qk(40u, kb) + qk(41u, kb) + qk(42u, kb) + qk(43u, kb) + qk(44u, kb) + qk(45u, kb) + qk(46u, kb) + qk(47u, kb) +
      qk(48u, kb) + qk(49u, kb) + qk(50u, kb) + qk(51u, kb) + qk(52u, kb) + qk(53u, kb) + qk(54u, kb) + qk(55u, kb) +
      qk(56u, kb) + qk(57u, kb) + qk(58u, kb) + qk(59u, kb) + qk(60u, kb) + qk(61u, kb) + qk(62u, kb) + qk(63u, kb);
    let dp =
      dov(0u, kb) + dov(1u, kb) + dov(2u, kb) + dov(3u, kb) + dov(4u, kb) + dov(5u, kb) + dov(6u, kb) + dov(7u, kb) +
      dov(8u, kb) + dov(9u, kb) + dov(10u, kb) + dov(11u, kb) + dov(12u, kb) + dov(13u, kb) + dov(14u, kb) + dov(15u, kb) +
      dov(16u, kb) + dov(17u, kb) + dov(18u, kb) + dov(19u, kb) + dov(20u, kb) + dov(21u, kb) + dov(22u, kb) + dov(23u, kb) +
      dov(24u, kb) + dov(25u, kb) + dov(26u, kb) + dov(27u, kb) + dov(28u, kb) + dov(29u, kb) + dov(30u, kb) + dov(31u, kb) +
      dov(32u, kb) + dov(33u, kb) + dov(34u, kb) + dov(35u, kb) + dov(36u, kb) + dov(37u, kb) + dov(38u, kb) + dov(39u, kb) +
      dov(40u, kb) + dov(41u, kb) + dov(42u, kb) + dov(43u, kb) + dov(44u, kb) + dov(45u, kb) + dov(46u, kb) + dov(47u, kb) +
      dov(48u, kb) + dov(49u, kb) + dov(50u, kb) + dov(51u, kb) + dov(52u, kb) + dov(53u, kb) + dov(54u, kb) + dov(55u, kb) +
      dov(56u, kb) + dov(57u, kb) + dov(58u, kb) + dov(59u, kb) + dov(60u, kb) + dov(61u, kb) + dov(62u, kb) + dov(63u, kb);
    let ds = exp(s - l) * (dp - di);
    dqAdd(0u, kb, ds); dqAdd(1u, kb, ds); dqAdd(2u, kb, ds); dqAdd(3u, kb, ds); dqAdd(4u, kb, ds); dqAdd(5u, kb, ds); dqAdd(6u, kb, ds); dqAdd(7u, kb, ds);
    dqAdd(8u, kb, ds); dqAdd(9u, kb, ds); dqAdd(10u, kb, ds); dqAdd(11u, kb, ds); dqAdd(12u, kb, ds); dqAdd(13u, kb, ds); dqAdd(14u, kb, ds); dqAdd(15u, kb, ds);
    dqAdd(16u, kb, ds); dqAdd(17u, kb, ds); dqAdd(18u, kb, ds); dqAdd(19u, kb, ds); dqAdd(20u, kb, ds); dqAdd(21u, kb, ds); dqAdd(22u, kb, ds); dqAdd(23u, kb, ds);
    dqAdd(24u, kb, ds); dqAdd(25u, kb, ds); dqAdd(26u, kb, ds); dqAdd(27u, kb, ds); dqAdd(28u, kb, ds); dqAdd(29u, kb, ds); dqAdd(30u, kb, ds); dqAdd(31u, kb, ds);
    dqAdd(32u, kb, ds); dqAdd(33u, kb, ds); dqAdd(34u, kb, ds); dqAdd(35u, kb, ds); dqAdd(36u, kb, ds); dqAdd(37u, kb, ds); dqAdd(38u, kb, ds); dqAdd(39u, kb, ds);
    dqAdd(40u, kb, ds); dqAdd(41u, kb, ds); dqAdd(42u, kb, ds); dqAdd(43u, kb, ds); dqAdd(44u, kb, ds); dqAdd(45u, kb, ds); dqAdd(46u, kb, ds); dqAdd(47u, kb, ds);
    dqAdd(48u, kb, ds); dqAdd(49u, kb, ds); dqAdd(50u, kb, ds); dqAdd(51u, kb, ds); dqAdd(52u, kb, ds); dqAdd(53u, kb, ds); dqAdd(54u, kb, ds); dqAdd(55u, kb, ds);
    dqAdd(56u, kb, ds); dqAdd(57u, kb, ds); dqAdd(58u, kb, ds); dqAdd(59u, kb, ds); dqAdd(60u, kb, ds); dqAdd(61u, kb, ds); dqAdd(62u, kb, ds); dqAdd(63u, kb, ds);
  }
  for (var d = 0u; d < D4; d++) { dq[ob + d] = accA[d] * p.scale; }
  delta[r] = di;
}
