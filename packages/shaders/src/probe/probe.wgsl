// The probe's two yardsticks: a long chain of independent vec4 FMAs per thread (compute peak)
// and a vec4 copy (memory bandwidth). Both write results that the host verifies.
struct Params { iters: u32, n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4f>;

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn probe_fma(@builtin(global_invocation_id) gid: vec3u) {
  let seed = f32(gid.x % 1024u) * 1e-4;
  var a0 = vec4f(seed, seed + 0.1, seed + 0.2, seed + 0.3);
  var a1 = a0 + 0.05;
  var a2 = a0 + 0.11;
  var a3 = a0 + 0.17;
  let m = vec4f(0.9999);
  let c = vec4f(0.0001);
  for (var i = 0u; i < p.iters; i++) {
    a0 = fma(a0, m, c);
    a1 = fma(a1, m, c);
    a2 = fma(a2, m, c);
    a3 = fma(a3, m, c);
  }
  if (gid.x < p.n) { out[gid.x] = a0 + a1 + a2 + a3; }
}

@group(0) @binding(0) var<storage, read> src: array<vec4f>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4f>;

@compute @workgroup_size(WG)
fn probe_copy(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i < arrayLength(&dst)) { dst[i] = src[i]; }
}
