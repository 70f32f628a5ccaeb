// Rows of a q4 table (the embedding, quant/reference.ts) as f32: out[n, :] = W[ids[n], :] · scale, a thread a word of
// nibbles (8 elements of a row; C is a multiple of 32, so a row is whole groups), written as two 16-byte vectors.
struct Params { N: u32, C: u32, V: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>; // (N)
@group(0) @binding(2) var<storage, read> q: array<u32>; // (V, C) nibbles
@group(0) @binding(3) var<storage, read> s: array<u32>; // their groups' bf16 scales
@group(0) @binding(4) var<storage, read_write> out: array<vec4f>; // (N, C)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn q4_gather(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  let words = p.C / 8u;
  if (i >= p.N * words) { return; }
  let n = i / words;
  let id = min(ids[n], p.V - 1u); // ids are checked on the host; this keeps every read in bounds
  let e = id * p.C + 8u * (i % words);
  let word = q[e / 8u];
  let g = e / 32u;
  let sc = bitcast<f32>(((s[g / 2u] >> (16u * (g % 2u))) & 0xffffu) << 16u);
  var v: array<f32, 8>;
  // q·s is exact in f32: one rounding, by the scale, as the embedding kernel's value · scale.
  for (var j = 0u; j < 8u; j++) { v[j] = (f32(i32((word >> (4u * j)) & 15u) - 8) * sc) * p.scale; }
  out[2u * i] = vec4f(v[0], v[1], v[2], v[3]);
  out[2u * i + 1u] = vec4f(v[4], v[5], v[6], v[7]);
}
