// q4 weights (quant/reference.ts) to f16, packed two a u32 as the matmuls read 16-bit B: a thread a word of nibbles
// (8 elements), written as one 16-byte vector. Every value q·s is exact in f16, so this copy holds the same weights
// the q4 matvec computes with.
struct Params { words: u32, first: u32, pad0: u32, pad1: u32 } // first: element index of the first word (multiple of 8)
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<u32>;
@group(0) @binding(2) var<storage, read> s: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4u>;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn q4_dequant(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.words) { return; }
  let e = p.first + 8u * i;
  let word = q[e / 8u];
  let g = e / 32u;
  let scale = bitcast<f32>(((s[g / 2u] >> (16u * (g % 2u))) & 0xffffu) << 16u);
  var o = vec4u();
  for (var j = 0u; j < 4u; j++) {
    let lo = f32(i32((word >> (8u * j)) & 15u) - 8) * scale;
    let hi = f32(i32((word >> (8u * j + 4u)) & 15u) - 8) * scale;
    o[j] = pack2x16float(vec2f(lo, hi));
  }
  out[i] = o;
}
