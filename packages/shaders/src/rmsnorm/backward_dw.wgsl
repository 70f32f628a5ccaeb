// RMSNorm backward for w, stage 1 of a deterministic two-stage sum over rows:
// partial[b, c] = sum over rows r of block b of dy[r, c] * x[r, c] * rstd[r].
struct Params { rows: u32, C: u32, rowsPerBlock: u32, blocks: u32, colGroups: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>; // (rows, C)
@group(0) @binding(2) var<storage, read> rstd: array<f32>; // (rows)
@group(0) @binding(3) var<storage, read> dy: array<f32>; // (rows, C)
@group(0) @binding(4) var<storage, read_write> partial: array<f32>; // (blocks, C)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn rmsnorm_backward_dw(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let tile = wid.x + wid.y * nwg.x;
  let b = tile / p.colGroups;
  let c = (tile % p.colGroups) * WG + l;
  if (b >= p.blocks || c >= p.C) { return; }
  let r0 = b * p.rowsPerBlock;
  let r1 = min(r0 + p.rowsPerBlock, p.rows);
  var acc = 0.0;
  for (var r = r0; r < r1; r++) {
    acc += dy[r * p.C + c] * x[r * p.C + c] * rstd[r];
  }
  partial[b * p.C + c] = acc;
}
