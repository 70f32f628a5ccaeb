// RMSNorm backward for w, stage 2: dw[c] = sum over blocks of partial[b, c] in block order (or dw += ...).
struct Params { C: u32, blocks: u32, accumulate: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> partial: array<f32>; // (blocks, C)
@group(0) @binding(2) var<storage, read_write> dw: array<f32>; // (C)

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn rmsnorm_backward_dw_reduce(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let c = gid.x + gid.y * nwg.x * WG;
  if (c >= p.C) { return; }
  var acc = 0.0;
  for (var b = 0u; b < p.blocks; b++) {
    acc += partial[b * p.C + c];
  }
  if (p.accumulate != 0u) { dw[c] += acc; } else { dw[c] = acc; }
}
