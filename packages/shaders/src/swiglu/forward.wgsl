// Gated MLP activation: h = act(g) * u elementwise over (N, F): SwiGLU (ACT 0, silu(g) = g * sigmoid(g)) or
// GeGLU (ACT 1, GELU's tanh approximation, Gemma's gelu_pytorch_tanh). g and u are read as rows of F, `ld` apart,
// from element offsets gOff and uOff: separate tight buffers (F = ld = n), or the halves of one gate|up product
// (rows of 2F, u at F).
struct Params { n: u32, F: u32, ld: u32, gOff: u32, uOff: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>; // (N, F)
@group(0) @binding(2) var<storage, read> u: array<f32>; // (N, F)
@group(0) @binding(3) var<storage, read_write> h: array<f32>; // (N, F)

override WG: u32 = 256;
override ACT: u32 = 0; // 0 = silu, 1 = gelu_tanh

const GELU_C = 0.7978845608028654; // sqrt(2 / pi)
const GELU_A = 0.044715;

// 0.5 * (1 + tanh(y)) = sigmoid(2y), computed without the cancellation of 1 + tanh(y) near -1; the argument is
// clamped so that exp stays finite (sigmoid(±80) is 1 or 0 in f32 already).
fn halfOnePlusTanh(y: f32) -> f32 { return 1.0 / (1.0 + exp(-clamp(2.0 * y, -80.0, 80.0))); }

@compute @workgroup_size(WG)
fn swiglu_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let row = i / p.F;
  let e = row * p.ld + i - row * p.F;
  let x = g[p.gOff + e];
  let v = u[p.uOff + e];
  if (ACT == 1u) {
    h[i] = x * halfOnePlusTanh(GELU_C * (x + GELU_A * x * x * x)) * v;
  } else {
    // exp(-x) overflows to inf for x < -88, which gives sigmoid 0 (the right limit), never NaN.
    h[i] = x / (1.0 + exp(-x)) * v;
  }
}
