// Workgroup-memory tiled matmul, same contract and bindings as register_blocked.wgsl: the workgroup stages
// BK-deep slices of op(A) and op(B) in workgroup memory and each thread computes 4 × 4 of C. For GPUs.
// Parameters, bindings, B_KIND and loadB: params.wgsl (prepended).

override WGN: u32 = 16u;
override WGM: u32 = 16u;
override BK: u32 = 16u;

// k-major tiles; rows padded by one so column-wise stores do not hit one bank.
var<workgroup> As: array<f32, BK * (WGM * 4u + 1u)>; // (BK, BM + 1)
var<workgroup> Bs: array<f32, BK * (WGN * 4u + 1u)>; // (BK, BN + 1)

@compute @workgroup_size(WGN, WGM)
fn matmul_forward_tiled(
  @builtin(local_invocation_id) lid: vec3u,
  @builtin(local_invocation_index) tid: u32,
  @builtin(workgroup_id) wid: vec3u,
) {
  let BM = WGM * 4u;
  let BN = WGN * 4u;
  let AS = BM + 1u;
  let BS = BN + 1u;
  let tA = (p.flags & 1u) != 0u;
  let tB = (p.flags & 2u) != 0u;
  let mBlock = wid.y * BM;
  let nBlock = wid.x * BN;
  let aBase = p.offA + wid.z * p.sA;
  let bBase = p.offB + wid.z * p.sB;
  var acc: array<vec4f, 4>; // rows lid.y + WGM·i, columns lid.x + WGN·j
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    // Consecutive threads walk each operand's unit-stride axis, so global loads coalesce.
    for (var l = tid; l < BM * BK; l += WGN * WGM) {
      let r = select(l / BK, l % BM, tA); // row m within the tile
      let q = select(l % BK, l / BM, tA); // k within the tile
      let m = mBlock + r;
      let k = k0 + q;
      // A clamped address and a select, not a branch: the loads of a thread overlap.
      let mc = min(m, p.M - 1u);
      let kc = min(k, p.K - 1u);
      As[q * AS + r] = select(0.0, a[aBase + select(mc * p.lda + kc, kc * p.lda + mc, tA)], m < p.M && k < p.K);
    }
    for (var l = tid; l < BN * BK; l += WGN * WGM) {
      let r = select(l % BN, l / BK, tB); // column n within the tile
      let q = select(l / BN, l % BK, tB);
      let n = nBlock + r;
      let k = k0 + q;
      let nc = min(n, p.N - 1u);
      let kc = min(k, p.K - 1u);
      Bs[q * BS + r] = select(0.0, loadB(bBase + select(kc * p.ldb + nc, nc * p.ldb + kc, tB)), n < p.N && k < p.K);
    }
    workgroupBarrier();
    for (var q = 0u; q < BK; q++) {
      let o = q * BS + lid.x;
      let bv = vec4f(Bs[o], Bs[o + WGN], Bs[o + 2u * WGN], Bs[o + 3u * WGN]);
      for (var i = 0u; i < 4u; i++) { acc[i] += As[q * AS + lid.y + WGM * i] * bv; }
    }
    workgroupBarrier();
  }
  let cBase = p.offC + wid.z * p.sC;
  for (var i = 0u; i < 4u; i++) {
    let m = mBlock + lid.y + WGM * i;
    for (var j = 0u; j < 4u; j++) {
      let n = nBlock + lid.x + WGN * j;
      if (m < p.M && n < p.N) {
        let idx = cBase + m * p.ldc + n;
        var v = p.alpha * acc[i][j];
        if ((p.flags & 4u) != 0u) { v += bias[p.offBias + n]; }
        if ((p.flags & 8u) != 0u) { v += c[idx]; }
        c[idx] = v;
      }
    }
  }
}
