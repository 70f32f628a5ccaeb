// Gated MLP activation backward: from dh, dg = dh * u * act'(g) and du = dh * act(g). SwiGLU (ACT 0):
// act'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g). GeGLU (ACT 1, GELU tanh approximation), with
// t = tanh(c * (g + a g^3)): act'(g) = 0.5 * (1 + t) + 0.5 * g * (1 - t^2) * c * (1 + 3 a g^2).
// g and u are read as in forward.wgsl (rows of F, `ld` apart, from gOff and uOff). swiglu_backward writes dg and du
// tight (N, F); swiglu_backward_packed writes them into one buffer (binding 4) where g and u were, in the same layout
// (the gradient of a gate|up product, for one matmul back through both weights).
struct Params { n: u32, F: u32, ld: u32, gOff: u32, uOff: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> u: array<f32>;
@group(0) @binding(3) var<storage, read> dh: array<f32>; // (N, F)
@group(0) @binding(4) var<storage, read_write> dg: array<f32>; // (N, F), or packed: dg and du
@group(0) @binding(5) var<storage, read_write> du: array<f32>; // (N, F)

override WG: u32 = 256;
override ACT: u32 = 0; // 0 = silu, 1 = gelu_tanh

const GELU_C = 0.7978845608028654; // sqrt(2 / pi)
const GELU_A = 0.044715;

// 0.5 * (1 + tanh(y)) = sigmoid(2y) and 0.5 * (1 - tanh(y)) = sigmoid(-2y), without the cancellation of 1 ± tanh(y)
// near ∓1; the argument is clamped so that exp stays finite (sigmoid(±80) is 1 or 0 in f32 already).
fn halfOnePlusTanh(y: f32) -> f32 { return 1.0 / (1.0 + exp(-clamp(2.0 * y, -80.0, 80.0))); }

// (dg, du) at element i of the (N, F) activation, whose g and u are at e.
fn grads(i: u32, e: u32) -> vec2f {
  let x = g[p.gOff + e];
  let d = dh[i];
  if (ACT == 1u) {
    let y = GELU_C * (x + GELU_A * x * x * x);
    let sp = halfOnePlusTanh(y); // 0.5 * (1 + t)
    let sm = halfOnePlusTanh(-y); // 0.5 * (1 - t); 0.5 * (1 - t^2) = 2 * sp * sm
    let act = x * sp;
    let dact = sp + 2.0 * x * sp * sm * GELU_C * (1.0 + 3.0 * GELU_A * x * x);
    return vec2f(d * u[p.uOff + e] * dact, d * act);
  }
  let s = 1.0 / (1.0 + exp(-x));
  return vec2f(d * u[p.uOff + e] * s * (1.0 + x * (1.0 - s)), d * x * s);
}

@compute @workgroup_size(WG)
fn swiglu_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let row = i / p.F;
  let r = grads(i, row * p.ld + i - row * p.F);
  dg[i] = r.x;
  du[i] = r.y;
}

@compute @workgroup_size(WG)
fn swiglu_backward_packed(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let row = i / p.F;
  let e = row * p.ld + i - row * p.F;
  let r = grads(i, e);
  dg[p.gOff + e] = r.x;
  dg[p.uOff + e] = r.y;
}
