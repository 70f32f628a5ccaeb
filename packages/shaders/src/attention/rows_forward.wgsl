// Causal grouped-query attention, "rows" variant: one thread per (token, head) walks keys 0..pos of its slot
// with an online softmax kept in registers. No workgroup memory and no barriers, which is what a CPU adapter
// (SwiftShader) runs fastest; the tiled kernel (forward.wgsl) is for GPUs. Same contract as attention_forward
// without split: tokens with a slot or pos out of range get o = 0, lse = 0.
struct Params { n: u32, h: u32, kv: u32, slots: u32, tmax: u32, nsplit: u32, chunk: u32, scale: f32 }
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
  for (var j = 0u; j <= pos; j++) {
    let kb = ((slot * p.tmax + j) * p.kv + kvh) * D4;
    var s = 0.0;
    for (var d = 0u; d < D4; d++) { s += dot(qr[d], kc[kb + d]); }
    let mNew = max(m, s);
    let c = exp(m - mNew);
    let e = exp(s - mNew);
    l = l * c + e;
    for (var d = 0u; d < D4; d++) { acc[d] = acc[d] * c + e * vc[kb + d]; }
    m = mNew;
  }
  let inv = 1.0 / l;
  for (var d = 0u; d < D4; d++) { o[ob + d] = acc[d] * inv; }
  lse[r] = m + log(l);
}
