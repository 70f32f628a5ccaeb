
// The lanes kernels' sum across a row's P adjacent lanes (lanes_*.wgsl; appended to them, which enable subgroups).
fn rowSum(x: f32) -> f32 {
  var s = x;
  for (var m = 1u; m < P; m <<= 1u) { s += subgroupShuffleXor(s, m); }
  return s;
}
