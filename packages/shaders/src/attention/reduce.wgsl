// Split-KV combine: o = sum_c exp(m_c - M) acc_c / L and lse = M + log L, with M = max_c m_c and
// L = sum_c exp(m_c - M) l_c over the nsplit partials of attention_forward (SPLIT). Rows without keys get 0.
struct Params { rows: u32, nsplit: u32 } // rows = N * H
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> part: array<f32>; // (nsplit, N, H, D)
@group(0) @binding(2) var<storage, read> ml: array<f32>; // (nsplit, N, H, 2)
@group(0) @binding(3) var<storage, read_write> o: array<f32>; // (N, H, D)
@group(0) @binding(4) var<storage, read_write> lse: array<f32>; // (N, H)

override D: u32 = 64;
override WG: u32 = 256;

@compute @workgroup_size(WG)
fn attention_reduce(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.rows * D) { return; }
  let row = i / D;
  var mx = -3.0e38;
  for (var c = 0u; c < p.nsplit; c++) { mx = max(mx, ml[2u * (c * p.rows + row)]); }
  var l = 0.0;
  var a = 0.0;
  for (var c = 0u; c < p.nsplit; c++) {
    let w = exp(ml[2u * (c * p.rows + row)] - mx);
    l += w * ml[2u * (c * p.rows + row) + 1u];
    a += w * part[(c * p.rows + row) * D + i % D];
  }
  o[i] = select(0.0, a / l, l > 0.0);
  if (i % D == 0u) { lse[row] = select(0.0, mx + log(l), l > 0.0); }
}
