// Residual add: y = a + b (elementwise), or y += b when `a` aliases y via the inplace entry.
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn add_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i < p.n) { y[i] = a[i] + b[i]; }
}
