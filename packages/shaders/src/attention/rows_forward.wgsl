// Causal grouped-query attention, "rows" variant: one thread per (token, head) walks keys 0..pos of its slot
// (pos - window + 1..pos under a sliding window)
// with an online softmax kept in registers. No workgroup memory and no barriers, which is what a CPU device
// (SwiftShader) runs fastest; the tiled kernel (forward.wgsl) is for GPUs. Same contract as attention_forward
// without split: tokens with a slot or pos out of range get o = 0, lse = 0.
struct Params { n: u32, h: u32, kv: u32, slots: u32, tmax: u32, nsplit: u32, chunk: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (N, H, D)
@group(0) @binding(2) var<storage, read> slotPos: array<u32>; // (N, 2)
@group(0) @binding(3) var<storage, read> kc: array<vec4f>; // (S, Tmax, KV, D)
@group(0) @binding(4) var<storage, read> vc: array<vec4f>; // (S, Tmax, KV, D)
@group(0) @binding(5) var<storage, read_write> o: array<vec4f>; // (N, H, D)
@group(0) @binding(6) var<storage, read_write> lse: array<f32>; // (N, H)

override D: u32 = 64; // a multiple of 4, <= 256
override WG: u32 = 64;
override D4 = D / 4u; // vec4 per row (D % 4 == 0)

var<private> qr: array<vec4f, 64>; // this row's q, scaled
var<private> acc: array<vec4f, 64>; // unnormalised output

// SwiftShader reads a private array at a loop variable with a per-lane gather, at a constant index directly; so the
// per-key loops over D are written out as 64 calls with constant indices (those at i >= D4 fold away), which
// is faster there and gives the same results bit for bit.
fn qk(i: u32, kb: u32) -> f32 { if (i < D4) { return dot(qr[i], kc[kb + i]); } return 0.0; }
fn pv(i: u32, kb: u32, c: f32, e: f32) { if (i < D4) { acc[i] = acc[i] * c + e * vc[kb + i]; } }

@compute @workgroup_size(WG)
fn attention_forward_rows(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let r = gid.x + gid.y * nwg.x * WG; // row = token * H + head
  if (r >= p.n * p.h) { return; }
  let i = r / p.h;
  let kvh = (r % p.h) / (p.h / p.kv);
  let slot = slotPos[2u * i];
  let pos = slotPos[2u * i + 1u];
  let ob = r * D4;
  if (slot >= p.slots || pos >= p.tmax) {
    for (var d = 0u; d < D4; d++) { o[ob + d] = vec4f(); }
    lse[r] = 0.0;
    return;
  }
  for (var d = 0u; d < D4; d++) { qr[d] = q[ob + d] * p.scale; acc[d] = vec4f(); }
  var m = -3.0e38;
  var l = 0.0;
  let j0 = select(0u, pos + 1u - p.window, pos + 1u > p.window); // sliding window: the last `window` keys
  for (var j = j0; j <= pos; j++) {
    let kb = ((slot * p.tmax + j) * p.kv + kvh) * D4;
    let s =
      qk(0u, kb) + qk(1u, kb) + qk(2u, kb) + qk(3u, kb) + qk(4u, kb) + qk(5u, kb) + qk(6u, kb) + qk(7u, kb) +
      qk(8u, kb) + qk(9u, kb) + qk(10u, kb) + qk(11u, kb) + qk(12u, kb) + qk(13u, kb) + qk(14u, kb) + qk(15u, kb) +
      qk(16u, kb) + qk(17u, kb) + qk(18u, kb) + qk(19u, kb) + qk(20u, kb) + qk(21u, kb) + qk(22u, kb) + qk(23u, kb) +
      qk(24u, kb) + qk(25u, kb) + qk(26u, kb) + qk(27u, kb) + qk(28u, kb) + qk(29u, kb) + qk(30u, kb) + qk(31u, kb) +
      qk(32u, kb) + qk(33u, kb) + qk(34u, kb) + qk(35u, kb) + qk(36u, kb) + qk(37u, kb) + qk(38u, kb) + qk(39u, kb) +
      qk(40u, kb) + qk(41u, kb) + qk(42u, kb) + qk(43u, kb) + qk(44u, kb) + qk(45u, kb) + qk(46u, kb) + qk(47u, kb) +
      qk(48u, kb) + qk(49u, kb) + qk(50u, kb) + qk(51u, kb) + qk(52u, kb) + qk(53u, kb) + qk(54u, kb) + qk(55u, kb) +
      qk(56u, kb) + qk(57u, kb) + qk(58u, kb) + qk(59u, kb) + qk(60u, kb) + qk(61u, kb) + qk(62u, kb) + qk(63u, kb);
    let mNew = max(m, s);
    let c = exp(m - mNew);
    let e = exp(s - mNew);
    l = l * c + e;
    pv(0u, kb, c, e); pv(1u, kb, c, e); pv(2u, kb, c, e); pv(3u, kb, c, e); pv(4u, kb, c, e); pv(5u, kb, c, e); pv(6u, kb, c, e); pv(7u, kb, c, e);
    pv(8u, kb, c, e); pv(9u, kb, c, e); pv(10u, kb, c, e); pv(11u, kb, c, e); pv(12u, kb, c, e); pv(13u, kb, c, e); pv(14u, kb, c, e); pv(15u, kb, c, e);
    pv(16u, kb, c, e); pv(17u, kb, c, e); pv(18u, kb, c, e); pv(19u, kb, c, e); pv(20u, kb, c, e); pv(21u, kb, c, e); pv(22u, kb, c, e); pv(23u, kb, c, e);
    pv(24u, kb, c, e); pv(25u, kb, c, e); pv(26u, kb, c, e); pv(27u, kb, c, e); pv(28u, kb, c, e); pv(29u, kb, c, e); pv(30u, kb, c, e); pv(31u, kb, c, e);
    pv(32u, kb, c, e); pv(33u, kb, c, e); pv(34u, kb, c, e); pv(35u, kb, c, e); pv(36u, kb, c, e); pv(37u, kb, c, e); pv(38u, kb, c, e); pv(39u, kb, c, e);
    pv(40u, kb, c, e); pv(41u, kb, c, e); pv(42u, kb, c, e); pv(43u, kb, c, e); pv(44u, kb, c, e); pv(45u, kb, c, e); pv(46u, kb, c, e); pv(47u, kb, c, e);
    pv(48u, kb, c, e); pv(49u, kb, c, e); pv(50u, kb, c, e); pv(51u, kb, c, e); pv(52u, kb, c, e); pv(53u, kb, c, e); pv(54u, kb, c, e); pv(55u, kb, c, e);
    pv(56u, kb, c, e); pv(57u, kb, c, e); pv(58u, kb, c, e); pv(59u, kb, c, e); pv(60u, kb, c, e); pv(61u, kb, c, e); pv(62u, kb, c, e); pv(63u, kb, c, e);
    m = mNew;
  }
  let inv = 1.0 / l;
  for (var d = 0u; d < D4; d++) { o[ob + d] = acc[d] * inv; }
  lse[r] = m + log(l);
}
