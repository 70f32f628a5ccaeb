// RMSNorm over rows of length C: y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), saving rstd; with put_add.wgsl
// after it, y = add + x * rstd * w (Gemma's branch norm and the residual add in one pass).
// TPR threads share a row (WG / TPR rows per workgroup), so short rows (per-head D) fill the workgroup too.
struct Params { rows: u32, C: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>; // (rows, C)
@group(0) @binding(2) var<storage, read> w: array<f32>; // (C)
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // (rows, C)
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>; // (rows)

override WG: u32 = 256;
override TPR: u32 = 256; // threads per row: a power of two dividing WG

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn rmsnorm_forward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let lane = l % TPR;
  let row = (wid.x + wid.y * nwg.x) * (WG / TPR) + l / TPR;
  let live = row < p.rows;
  let base = row * p.C;
  var ss = 0.0;
  if (live) {
    for (var c = lane; c < p.C; c += TPR) {
      let v = x[base + c];
      ss += v * v;
    }
  }
  // Tree sum within each TPR-lane segment: a fixed order, so results do not depend on timing. With one
  // thread per row there is nothing to share (no barriers, which are costly on CPU implementations).
  var total = ss;
  if (TPR > 1u) {
    red[l] = ss;
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
      workgroupBarrier();
      if (lane < s) { red[l] += red[l + s]; }
    }
    workgroupBarrier();
    total = red[l - lane];
  }
  if (!live) { return; }
  let r = inverseSqrt(total / f32(p.C) + p.eps);
  for (var c = lane; c < p.C; c += TPR) {
    put(base + c, x[base + c] * r * w[c]);
  }
  if (lane == 0u) { rstd[row] = r; }
}
