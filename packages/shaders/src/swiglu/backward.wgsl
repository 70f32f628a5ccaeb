// Gated MLP activation backward: from dh, dg = dh * u * act'(g) and du = dh * act(g). SwiGLU (ACT 0):
// act'(g) = s * (1 + g * (1 - s)) with s = sigmoid(g). GeGLU (ACT 1, GELU tanh approximation), with
// t = tanh(c * (g + a g^3)): act'(g) = 0.5 * (1 + t) + 0.5 * g * (1 - t^2) * c * (1 + 3 a g^2).
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>; // (N, F)
@group(0) @binding(2) var<storage, read> u: array<f32>; // (N, F)
@group(0) @binding(3) var<storage, read> dh: array<f32>; // (N, F)
@group(0) @binding(4) var<storage, read_write> dg: array<f32>; // (N, F)
@group(0) @binding(5) var<storage, read_write> du: array<f32>; // (N, F)

override WG: u32 = 256;
override ACT: u32 = 0; // 0 = silu, 1 = gelu_tanh

const GELU_C = 0.7978845608028654; // sqrt(2 / pi)
const GELU_A = 0.044715;

// 0.5 * (1 + tanh(y)) = sigmoid(2y) and 0.5 * (1 - tanh(y)) = sigmoid(-2y), without the cancellation of 1 ± tanh(y)
// near ∓1; the argument is clamped so that exp stays finite (sigmoid(±80) is 1 or 0 in f32 already).
fn halfOnePlusTanh(y: f32) -> f32 { return 1.0 / (1.0 + exp(-clamp(2.0 * y, -80.0, 80.0))); }

@compute @workgroup_size(WG)
fn swiglu_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let x = g[i];
  let d = dh[i];
  if (ACT == 1u) {
    let y = GELU_C * (x + GELU_A * x * x * x);
    let sp = halfOnePlusTanh(y); // 0.5 * (1 + t)
    let sm = halfOnePlusTanh(-y); // 0.5 * (1 - t); 0.5 * (1 - t^2) = 2 * sp * sm
    let act = x * sp;
    let dact = sp + 2.0 * x * sp * sm * GELU_C * (1.0 + 3.0 * GELU_A * x * x);
    dg[i] = d * u[i] * dact;
    du[i] = d * act;
  } else {
    let s = 1.0 / (1.0 + exp(-x));
    dg[i] = d * u[i] * s * (1.0 + x * (1.0 - s));
    du[i] = d * x * s;
  }
}
