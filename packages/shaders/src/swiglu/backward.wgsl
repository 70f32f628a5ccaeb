// SwiGLU backward: from dh, dg = dh * u * s * (1 + g * (1 - s)) with s = sigmoid(g), and du = dh * silu(g).
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>; // (N, F)
@group(0) @binding(2) var<storage, read> u: array<f32>; // (N, F)
@group(0) @binding(3) var<storage, read> dh: array<f32>; // (N, F)
@group(0) @binding(4) var<storage, read_write> dg: array<f32>; // (N, F)
@group(0) @binding(5) var<storage, read_write> du: array<f32>; // (N, F)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn swiglu_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let x = g[i];
  let s = 1.0 / (1.0 + exp(-x));
  let d = dh[i];
  dg[i] = d * u[i] * s * (1.0 + x * (1.0 - s));
  du[i] = d * x * s;
}
