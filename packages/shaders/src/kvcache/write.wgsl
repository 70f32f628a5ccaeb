// KV-cache write: scatters the new tokens' k and v rows (N, KV, D) into the per-layer caches (S, Tmax, KV, D) at
// each token's (slot, pos). Tokens whose slot or pos is out of range (e.g. padding marked 0xffffffff) are skipped.
struct Params { n: u32, row: u32, slots: u32, tmax: u32 } // row = KV * D
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> slotPos: array<u32>; // (N, 2)
@group(0) @binding(2) var<storage, read> k: array<f32>; // (N, KV, D)
@group(0) @binding(3) var<storage, read> v: array<f32>; // (N, KV, D)
@group(0) @binding(4) var<storage, read_write> kc: array<f32>; // (S, Tmax, KV, D)
@group(0) @binding(5) var<storage, read_write> vc: array<f32>; // (S, Tmax, KV, D)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn kvcache_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n * p.row) { return; }
  let t = i / p.row;
  let slot = slotPos[2u * t];
  let pos = slotPos[2u * t + 1u];
  if (slot >= p.slots || pos >= p.tmax) { return; }
  let dst = (slot * p.tmax + pos) * p.row + i % p.row;
  kc[dst] = k[i];
  vc[dst] = v[i];
}
