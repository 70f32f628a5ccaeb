// Backward of token logprob (and optionally entropy) for one vocabulary chunk, in place: the chunk's
// logits are overwritten with dlogits, ready for the LM-head weight and input gradients of that chunk.
// With x = logit / T, p = softmax(x), logp = x_t - lse, H = -sum p log p:
//   dlogp/dx_j = [j == t] - p_j,   dH/dx_j = -p_j (log p_j + H),   dlogit_j = dx_j / T.
// A row with an allowed set (forward.wgsl's `allow`) has p_j = 0, so dlogit_j = 0, off the set.
struct Params {
  n: u32,
  cols: u32,
  ld: u32,
  v0: u32,
  has_dentropy: u32, // 0: no entropy gradient (dentropy is not read)
  temperature: f32,
  masked: u32, // 1: `allow` holds each row's allowed set
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>; // (N, ld) in, dlogits out
@group(0) @binding(2) var<storage, read> targets: array<u32>; // (N,)
@group(0) @binding(3) var<storage, read> lse: array<f32>; // (N,) of x, from logprobs_finalize
@group(0) @binding(4) var<storage, read> entropy: array<f32>; // (N,)
@group(0) @binding(5) var<storage, read> dlogp: array<f32>; // (N,)
@group(0) @binding(6) var<storage, read> dentropy: array<f32>; // (N,)
@group(0) @binding(7) var<storage, read> allow: array<u32>; // as in forward.wgsl; read when p.masked is 1

override WG: u32 = 256;

// One thread per chunk element, a 1-D grid folded into x/y.
@compute @workgroup_size(WG)
fn logprobs_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let idx = gid.x + gid.y * nwg.x * WG;
  if (idx >= p.n * p.cols) { return; }
  let row = idx / p.cols;
  let j = idx - row * p.cols;
  let k = row * p.ld + j;
  if (p.masked != 0u) {
    let off = allow[row];
    let v = p.v0 + j;
    if (off != 0xffffffffu && (allow[off + (v >> 5u)] & (1u << (v & 31u))) == 0u) {
      logits[k] = 0.0;
      return;
    }
  }
  let lp = logits[k] / p.temperature - lse[row]; // log p_j
  let pj = exp(lp);
  let g = dlogp[row];
  var dx = -pj * g;
  if (targets[row] == p.v0 + j) { dx += g; }
  if (p.has_dentropy != 0u) { dx -= dentropy[row] * pj * (lp + entropy[row]); }
  logits[k] = dx / p.temperature;
}
