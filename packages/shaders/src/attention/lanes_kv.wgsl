
// The lanes forward and dq kernels' K/V tile (lanes_forward.wgsl, lanes_backward.wgsl; appended to them): keys
// k0 .. k0 + BK of the sequence whose key 0 is row `base` of k and v, kv-head kvh, into ks and vs; keys at or past
// `end` are zeros.
fn stageKv(base: u32, k0: u32, end: u32, kvh: u32, tid: u32) {
  for (var e = tid; e < BK * D4; e += WG) {
    let key = k0 + e / D4;
    var x = vec4f(0.0);
    var y = vec4f(0.0);
    if (key < end) {
      let at = ((base + key) * p.kv + kvh) * D4 + e % D4;
      x = k[at];
      y = v[at];
    }
    ks[e] = x;
    vs[e] = y;
  }
}
