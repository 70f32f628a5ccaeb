// max |x| over n elements of x, for the scale of an operand the coop matmul rounds to f16 (its largest magnitude
// brought to [2^14, 2^15), under f16's 65504). Two passes, no atomics: absmax_partial's workgroups each take a
// grid-strided share and write their max to out[1 + workgroup]; absmax_final (one workgroup) writes the max of those
// to out[0].
struct Params { n: u32, off: u32, parts: u32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>; // [max, partial 0, partial 1, ...]
@group(0) @binding(2) var<storage, read> x: array<f32>; // absmax_partial only

const WG = 256u;
var<workgroup> red: array<f32, WG>;

fn reduce(lid: u32, v: f32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  return red[0];
}

@compute @workgroup_size(WG)
fn absmax_partial(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u) {
  var m = 0.0;
  // Four independent loads a trip, so a thread keeps several in flight.
  let stride = p.parts * WG;
  var i = wid.x * WG + lid;
  for (; i + 3u * stride < p.n; i += 4u * stride) {
    let a = abs(x[p.off + i]);
    let b = abs(x[p.off + i + stride]);
    let c = abs(x[p.off + i + 2u * stride]);
    let d = abs(x[p.off + i + 3u * stride]);
    m = max(m, max(max(a, b), max(c, d)));
  }
  for (; i < p.n; i += stride) { m = max(m, abs(x[p.off + i])); }
  let r = reduce(lid, m);
  if (lid == 0u) { out[1u + wid.x] = r; }
}

@compute @workgroup_size(WG)
fn absmax_final(@builtin(local_invocation_index) lid: u32) {
  var m = 0.0;
  for (var i = lid; i < p.parts; i += WG) { m = max(m, out[1u + i]); }
  let r = reduce(lid, m);
  if (lid == 0u) { out[0] = r; }
}
