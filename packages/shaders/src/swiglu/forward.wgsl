// SwiGLU gate: h = silu(g) * u elementwise over (N, F), with silu(g) = g * sigmoid(g).
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>; // (N, F)
@group(0) @binding(2) var<storage, read> u: array<f32>; // (N, F)
@group(0) @binding(3) var<storage, read_write> h: array<f32>; // (N, F)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn swiglu_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let x = g[i];
  // exp(-x) overflows to inf for x < -88, which gives sigmoid 0 (the right limit), never NaN.
  h[i] = x / (1.0 + exp(-x)) * u[i];
}
