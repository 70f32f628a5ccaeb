// Token log-probabilities streamed over vocabulary chunks, so (N, V) logits are never held at once.
// logprobs_forward folds one chunk into running per-row stats; logprobs_finalize turns them into
// logprob, entropy and lse. N = tokens (rows), V = vocab; a chunk is columns [v0, v0 + cols) of
// every row, stored with row stride ld. Logits are divided by the temperature first (x = logit / T).
// With `masked`, a row may have an allowed set (a constrained sampler's mask): its softmax is taken over the
// allowed tokens alone, as the sampler drew from it, and the other columns are skipped.
struct Params {
  n: u32,
  cols: u32,
  ld: u32,
  v0: u32,
  first: u32, // 1: this chunk starts the stats (nothing is read from `stats`)
  temperature: f32,
  masked: u32, // 1: `allow` holds each row's allowed set
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // (N, ld), columns [0, cols) read
@group(0) @binding(2) var<storage, read> targets: array<u32>; // (N,)
// Per row: max m, s = sum exp(x - m), u = sum exp(x - m) * (x - m), target logit x_t.
// u is kept relative to the max so that entropy = log s - u / s has no cancellation.
@group(0) @binding(3) var<storage, read_write> stats: array<vec4f>; // (N,)
// Words [0, N): the word offset in this buffer of each row's bitmask over the vocabulary (bit v & 31 of word
// v >> 5 set = token v allowed), or ALL for a row with no mask. Only read when p.masked is 1.
@group(0) @binding(4) var<storage, read> allow: array<u32>;

// Finalize's bindings reuse the numbers above; each entry point sees only its own.
@group(0) @binding(1) var<storage, read> fstats: array<vec4f>; // (N,)
@group(0) @binding(2) var<storage, read_write> logprob: array<f32>; // (N,)
@group(0) @binding(3) var<storage, read_write> entropy: array<f32>; // (N,)
@group(0) @binding(4) var<storage, read_write> lse: array<f32>; // (N,)

override WG: u32 = 256; // a power of two
// The empty max: finite, so (x - m) * s stays 0 instead of inf * 0.
const EMPTY: f32 = -1e30;
const ALL: u32 = 0xffffffffu;

// Whether column v of a row whose mask starts at word `off` is allowed.
fn allowed(off: u32, v: u32) -> bool {
  return off == ALL || (allow[off + (v >> 5u)] & (1u << (v & 31u))) != 0u;
}

var<workgroup> part: array<vec3f, WG>;

// Combines two (m, s, u) partial stats into stats relative to the larger max.
fn merge(a: vec3f, b: vec3f) -> vec3f {
  let m = max(a.x, b.x);
  let fa = exp(a.x - m);
  let fb = exp(b.x - m);
  return vec3f(m, a.y * fa + b.y * fb, fa * (a.z + (a.x - m) * a.y) + fb * (b.z + (b.x - m) * b.y));
}

// One workgroup per row; threads stride over the chunk's columns.
@compute @workgroup_size(WG)
fn logprobs_forward(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.n) { return; } // uniform: depends on the workgroup only
  let base = row * p.ld;
  var acc = vec3f(EMPTY, 0.0, 0.0);
  var off = ALL;
  if (p.masked != 0u) { off = allow[row]; }
  for (var j = lid; j < p.cols; j += WG) {
    if (!allowed(off, p.v0 + j)) { continue; }
    let x = logits[base + j] / p.temperature;
    if (x > acc.x) {
      let f = exp(acc.x - x);
      acc = vec3f(x, acc.y * f, f * (acc.z + (acc.x - x) * acc.y));
    }
    let e = exp(x - acc.x);
    acc.y += e;
    acc.z += e * (x - acc.x);
  }
  part[lid] = acc;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { part[lid] = merge(part[lid], part[lid + s]); }
    workgroupBarrier();
  }
  if (lid == 0u) {
    var st = vec4f(part[0], 0.0);
    if (p.first == 0u) {
      let old = stats[row];
      st = vec4f(merge(old.xyz, part[0]), old.w);
    }
    let t = targets[row];
    if (t >= p.v0 && t - p.v0 < p.cols) { st.w = logits[base + t - p.v0] / p.temperature; }
    stats[row] = st;
  }
}

@compute @workgroup_size(WG)
fn logprobs_finalize(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.n) { return; }
  let st = fstats[i];
  let ls = log(st.y);
  lse[i] = st.x + ls;
  logprob[i] = (st.w - st.x) - ls;
  entropy[i] = ls - st.z / st.y;
}
