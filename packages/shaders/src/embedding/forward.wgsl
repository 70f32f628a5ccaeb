// Embedding lookup out[n, :] = W[ids[n], :] * scale for the tokens whose id falls in this shard's rows [r0, r1)
// (scale 1, or Gemma's sqrt(hidden_size)). W is f32 or 16-bit (bf16 / f16, two per u32); a big vocabulary is
// split into shards so each binding fits.
struct Params { N: u32, C: u32, r0: u32, r1: u32, first: u32, colGroups: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>; // (N)
@group(0) @binding(2) var<storage, read> table: array<u32>; // rows [r0, r1) of (V, C), row r0 at element `first`
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (N, C)

override WG: u32 = 256;
override DTYPE: u32 = 0; // 0 = f32, 1 = bf16, 2 = f16

fn element(e: u32) -> f32 {
  if (DTYPE == 0u) { return bitcast<f32>(table[e]); }
  let w = table[e >> 1u];
  let even = (e & 1u) == 0u;
  if (DTYPE == 1u) { return bitcast<f32>(select(w & 0xffff0000u, w << 16u, even)); }
  let h = unpack2x16float(w);
  return select(h.y, h.x, even);
}

// A workgroup covers WG * 4 columns of one token: the id is loaded once per workgroup, and tokens of
// other shards cost one load and an exit.
@compute @workgroup_size(WG)
fn embedding_forward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let tile = wid.x + wid.y * nwg.x;
  let n = tile / p.colGroups;
  if (n >= p.N) { return; }
  let id = ids[n];
  // Other shards write the other tokens; an id outside every shard leaves its row untouched.
  if (id < p.r0 || id >= p.r1) { return; }
  let src = p.first + (id - p.r0) * p.C;
  // Columns WG apart per thread, so neighbouring threads touch neighbouring elements.
  let g = tile % p.colGroups;
  let end = min((g + 1u) * WG * 4u, p.C);
  for (var c = g * WG * 4u + l; c < end; c += WG) {
    out[n * p.C + c] = element(src + c) * p.scale;
  }
}
