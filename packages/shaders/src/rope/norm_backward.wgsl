// The backward of ropeQkv's per-head q/k RMSNorm (Qwen3, Gemma 3) in training, on packed rows, in place. After
// rope_backward_pack, y holds rows (N, ldq) whose q and k heads are the gradient at the norms' output; x holds the
// forward's packed rows before the norms. Each q and k head row of y becomes the gradient at the norm's input:
//   dx = rs (w dy - x rs² Σ(w dy x) / D),  rs = 1 / sqrt(Σ x² / D + eps), recomputed from x.
// The v heads (and any columns past them) are left as they are. TPR threads a head row, WG / TPR rows a workgroup:
// TPR 1 for CPUs (a row a thread), more for GPUs (the row's two sums shared through workgroup memory).
struct Params {
  n: u32, h: u32, kv: u32, d: u32, // tokens, q heads, kv heads, head dim
  ldq: u32, eps: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>; // (N, ldq)
@group(0) @binding(2) var<storage, read> x: array<f32>; // (N, ldq)
@group(0) @binding(3) var<storage, read> qn: array<f32>; // (D) q_norm weight
@group(0) @binding(4) var<storage, read> kn: array<f32>; // (D) k_norm weight

override WG: u32 = 64;
override TPR: u32 = 1; // a power of two, at most WG
var<workgroup> part: array<vec2f, WG>;

@compute @workgroup_size(WG)
fn qk_norm_backward_packed(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u,
                           @builtin(num_workgroups) nwg: vec3u) {
  let heads = p.h + p.kv; // the q and k heads of a token
  let i = (wid.x + wid.y * nwg.x) * (WG / TPR) + lid / TPR; // a head row over (N, H + KV)
  let j = lid % TPR;
  let valid = i < p.n * heads;
  let src = (i / heads) * p.ldq + (i % heads) * p.d;
  let isQ = i % heads < p.h;
  var s2 = vec2f(0.0); // Σ x², Σ w dy x over this thread's elements
  if (valid) {
    for (var e = j; e < p.d; e += TPR) {
      let xe = x[src + e];
      s2 += vec2f(xe * xe, select(kn[e], qn[e], isQ) * y[src + e] * xe);
    }
  }
  part[lid] = s2;
  workgroupBarrier();
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    if (j < s) { part[lid] += part[lid + s]; }
    workgroupBarrier();
  }
  if (!valid) { return; }
  let sums = part[lid - j];
  let rs = inverseSqrt(sums.x / f32(p.d) + p.eps);
  let c = rs * rs * sums.y / f32(p.d);
  for (var e = j; e < p.d; e += TPR) {
    y[src + e] = rs * (select(kn[e], qn[e], isQ) * y[src + e] - x[src + e] * c);
  }
}
