// AdamW over one flat f32 parameter buffer (all LoRA tensors), with global grad-norm clipping on the GPU:
// adamw_sumsq (partial sums of squares) -> adamw_norm (norm, clip factor) -> adamw_forward (the update,
// which reads the clip factor from a buffer), so a step needs no readback. adamw_scale scales grads.
struct Params {
  n: u32,
  parts: u32, // workgroups of adamw_sumsq, partial sums for adamw_norm
  lr: f32,
  beta1: f32,
  beta2: f32,
  eps: f32,
  weight_decay: f32,
  bc1: f32, // 1 - beta1^t, bias correction of step t
  bc2: f32, // 1 - beta2^t
  max_norm: f32, // <= 0: no clipping
  scale: f32, // adamw_scale's factor
}
@group(0) @binding(0) var<uniform> p: Params;

// adamw_sumsq
@group(0) @binding(1) var<storage, read> sq_grads: array<f32>; // (n,)
@group(0) @binding(2) var<storage, read_write> sq_part: array<f32>; // (parts,)
// adamw_norm
@group(0) @binding(1) var<storage, read> nm_part: array<f32>; // (parts,)
// (grad norm, clip factor, 1 if the norm is finite else 0, sum of squares)
@group(0) @binding(2) var<storage, read_write> nm_stats: vec4f;
// adamw_forward
@group(0) @binding(1) var<storage, read_write> weights: array<f32>; // (n,)
@group(0) @binding(2) var<storage, read> grads: array<f32>; // (n,)
@group(0) @binding(3) var<storage, read_write> m1: array<f32>; // (n,) first moment
@group(0) @binding(4) var<storage, read_write> m2: array<f32>; // (n,) second moment
@group(0) @binding(5) var<storage, read> stats: vec4f;
// adamw_scale
@group(0) @binding(1) var<storage, read_write> sc_grads: array<f32>; // (n,)

override WG: u32 = 256; // a power of two
var<workgroup> red: array<f32, WG>;

fn reduce(x: f32, lid: u32) -> f32 {
  red[lid] = x;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) { red[lid] += red[lid + s]; }
  }
  workgroupBarrier();
  return red[0];
}

// Each of `parts` workgroups strides over the buffer and writes one partial sum of squares.
@compute @workgroup_size(WG)
fn adamw_sumsq(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var i = wid.x * WG + lid; i < p.n; i += p.parts * WG) {
    let g = sq_grads[i];
    acc += g * g;
  }
  let total = reduce(acc, lid);
  if (lid == 0u) { sq_part[wid.x] = total; }
}

// One workgroup: the global norm and the clip factor min(1, max_norm / (norm + 1e-6)).
@compute @workgroup_size(WG)
fn adamw_norm(@builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var i = lid; i < p.parts; i += WG) { acc += nm_part[i]; }
  let ss = reduce(acc, lid);
  if (lid == 0u) {
    let norm = sqrt(ss);
    // Checked on the bits: compilers may fold float NaN / inf tests away.
    let finite = (bitcast<u32>(ss) & 0x7f800000u) != 0x7f800000u;
    var clip = 1.0;
    if (p.max_norm > 0.0) { clip = min(1.0, p.max_norm / (norm + 1e-6)); }
    nm_stats = vec4f(norm, clip, select(0.0, 1.0, finite), ss);
  }
}

// The update of one element (PyTorch AdamW order: decoupled decay, then the bias-corrected Adam step).
// A non-finite grad norm skips the whole step: weights and moments stay as they are.
@compute @workgroup_size(WG)
fn adamw_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  let st = stats;
  if (i >= p.n || st.z == 0.0) { return; }
  let g = grads[i] * st.y;
  let m = p.beta1 * m1[i] + (1.0 - p.beta1) * g;
  let v = p.beta2 * m2[i] + (1.0 - p.beta2) * g * g;
  m1[i] = m;
  m2[i] = v;
  let w = weights[i] * (1.0 - p.lr * p.weight_decay);
  weights[i] = w - p.lr * (m / p.bc1) / (sqrt(v / p.bc2) + p.eps);
}

// grads *= scale; a zero scale writes exact zeros (clearing NaN too).
@compute @workgroup_size(WG)
fn adamw_scale(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  sc_grads[i] = select(sc_grads[i] * p.scale, 0.0, p.scale == 0.0);
}
