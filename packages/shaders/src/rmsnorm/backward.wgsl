// RMSNorm backward for x: dx = rstd * (w*dy - x * rstd^2 * mean(w*dy*x)), written or added (dx += ...)
// since the residual stream sums gradients. Same row layout as the forward (TPR threads per row).
struct Params { rows: u32, C: u32, accumulate: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>; // (rows, C)
@group(0) @binding(2) var<storage, read> w: array<f32>; // (C)
@group(0) @binding(3) var<storage, read> rstd: array<f32>; // (rows)
@group(0) @binding(4) var<storage, read> dy: array<f32>; // (rows, C)
@group(0) @binding(5) var<storage, read_write> dx: array<f32>; // (rows, C)

override WG: u32 = 256;
override TPR: u32 = 256; // threads per row: a power of two dividing WG

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn rmsnorm_backward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let lane = l % TPR;
  let row = (wid.x + wid.y * nwg.x) * (WG / TPR) + l / TPR;
  let live = row < p.rows;
  let base = row * p.C;
  var dot = 0.0;
  if (live) {
    for (var c = lane; c < p.C; c += TPR) {
      dot += w[c] * dy[base + c] * x[base + c];
    }
  }
  // Tree sum within each TPR-lane segment: a fixed order, so results do not depend on timing. With one
  // thread per row there is nothing to share (no barriers, which are costly on CPU implementations).
  var total = dot;
  if (TPR > 1u) {
    red[l] = dot;
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
      workgroupBarrier();
      if (lane < s) { red[l] += red[l + s]; }
    }
    workgroupBarrier();
    total = red[l - lane];
  }
  if (!live) { return; }
  let r = rstd[row];
  let k = r * r * total / f32(p.C);
  for (var c = lane; c < p.C; c += TPR) {
    let i = base + c;
    let g = r * (w[c] * dy[i] - x[i] * k);
    if (p.accumulate != 0u) { dx[i] += g; } else { dx[i] = g; }
  }
}
