// Wide-tile matmul for GPUs, same contract and bindings as register_blocked.wgsl: a workgroup of WGN × WGM threads owns a
// (8·WGM) × (8·WGN) block of C and stages BK-deep slices of op(A) and op(B) in workgroup memory, k-major, read back
// as vec4; each thread keeps 8 × 8 of C in registers, rows {4·ty + i, 4·WGM + 4·ty + i} and the same for columns,
// so a step over k is 4 vec4 reads from workgroup memory for 64 multiply-adds.
// Parameters, bindings, B_KIND and loadB: params.wgsl (prepended).

override WGN: u32 = 16u;
override WGM: u32 = 16u;
override BK: u32 = 8u;

// (BK, BM) and (BK, BN) as vec4 along m and n: BM = 8·WGM, so a k-row of As holds 2·WGM vec4.
var<workgroup> As: array<vec4f, BK * WGM * 2u>;
var<workgroup> Bs: array<vec4f, BK * WGN * 2u>;

// op(A)[m, k] and op(B)[k, n], 0 outside the matrices: loaded from a clamped address and selected, without a
// branch, so a thread's loads are in flight together.
fn loadA(base: u32, m: u32, k: u32, tA: bool) -> f32 {
  let mc = min(m, p.M - 1u);
  let kc = min(k, p.K - 1u);
  return select(0.0, a[base + select(mc * p.lda + kc, kc * p.lda + mc, tA)], m < p.M && k < p.K);
}
fn loadBk(base: u32, n: u32, k: u32, tB: bool) -> f32 {
  let nc = min(n, p.N - 1u);
  let kc = min(k, p.K - 1u);
  return select(0.0, loadB(base + select(kc * p.ldb + nc, nc * p.ldb + kc, tB)), n < p.N && k < p.K);
}

// acc[2r + h]: row r (0..3: 4·ty + r, 4..7: 4·WGM + 4·ty + r - 4), columns of half h (4·tx.., 4·WGN + 4·tx..)
var<private> acc: array<vec4f, 16>;

fn fma8(a0: vec4f, a1: vec4f, b0: vec4f, b1: vec4f) {
  acc[0] += a0.x * b0; acc[1] += a0.x * b1;
  acc[2] += a0.y * b0; acc[3] += a0.y * b1;
  acc[4] += a0.z * b0; acc[5] += a0.z * b1;
  acc[6] += a0.w * b0; acc[7] += a0.w * b1;
  acc[8] += a1.x * b0; acc[9] += a1.x * b1;
  acc[10] += a1.y * b0; acc[11] += a1.y * b1;
  acc[12] += a1.z * b0; acc[13] += a1.z * b1;
  acc[14] += a1.w * b0; acc[15] += a1.w * b1;
}

// Row m of C at columns n0..n0+3 (lo) and n1..n1+3 (hi), with alpha, bias and accumulate.
fn storeRow(cBase: u32, m: u32, n0: u32, n1: u32, lo: vec4f, hi: vec4f) {
  if (m >= p.M) { return; }
  for (var j = 0u; j < 8u; j++) {
    let n = select(n0 + j, n1 + j - 4u, j >= 4u);
    if (n < p.N) {
      let idx = cBase + m * p.ldc + n;
      var v = p.alpha * select(lo[j & 3u], hi[j & 3u], j >= 4u);
      if ((p.flags & 4u) != 0u) { v += bias[p.offBias + n]; }
      if ((p.flags & 8u) != 0u) { v += c[idx]; }
      c[idx] = v;
    }
  }
}

@compute @workgroup_size(WGN, WGM)
fn matmul_forward_wide(
  @builtin(local_invocation_id) lid: vec3u,
  @builtin(local_invocation_index) tid: u32,
  @builtin(workgroup_id) wid: vec3u,
) {
  let BM = WGM * 8u;
  let BN = WGN * 8u;
  let threads = WGN * WGM;
  let tA = (p.flags & 1u) != 0u;
  let tB = (p.flags & 2u) != 0u;
  let mBlock = wid.y * BM;
  let nBlock = wid.x * BN;
  let aBase = p.offA + wid.z * p.sA;
  let bBase = p.offB + wid.z * p.sB;
  acc = array<vec4f, 16>();
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    // Each thread fills whole vec4 (4 rows or 4 columns at one k: threads never share a vec4, which some backends
    // store whole); consecutive threads walk each operand's unit-stride axis, so global loads coalesce.
    for (var l = tid; l < BK * 2u * WGM; l += threads) {
      let r4 = select(l / BK, l % (2u * WGM), tA); // vec4 of rows 4·r4.. within the block
      let q = select(l % BK, l / (2u * WGM), tA); // k within the slice
      As[q * 2u * WGM + r4] = vec4f(
        loadA(aBase, mBlock + 4u * r4, k0 + q, tA),
        loadA(aBase, mBlock + 4u * r4 + 1u, k0 + q, tA),
        loadA(aBase, mBlock + 4u * r4 + 2u, k0 + q, tA),
        loadA(aBase, mBlock + 4u * r4 + 3u, k0 + q, tA),
      );
    }
    for (var l = tid; l < BK * 2u * WGN; l += threads) {
      let r4 = select(l % (2u * WGN), l / BK, tB); // vec4 of columns 4·r4.. within the block
      let q = select(l / (2u * WGN), l % BK, tB);
      Bs[q * 2u * WGN + r4] = vec4f(
        loadBk(bBase, nBlock + 4u * r4, k0 + q, tB),
        loadBk(bBase, nBlock + 4u * r4 + 1u, k0 + q, tB),
        loadBk(bBase, nBlock + 4u * r4 + 2u, k0 + q, tB),
        loadBk(bBase, nBlock + 4u * r4 + 3u, k0 + q, tB),
      );
    }
    workgroupBarrier();
    for (var q = 0u; q < BK; q++) {
      let ao = q * 2u * WGM + lid.y;
      let bo = q * 2u * WGN + lid.x;
      fma8(As[ao], As[ao + WGM], Bs[bo], Bs[bo + WGN]);
    }
    workgroupBarrier();
  }
  // Constant indices into acc only (a computed one would move the whole array out of registers).
  let cBase = p.offC + wid.z * p.sC;
  let r0 = mBlock + 4u * lid.y;
  let r1 = mBlock + 4u * WGM + 4u * lid.y;
  let n0 = nBlock + 4u * lid.x;
  let n1 = nBlock + 4u * WGN + 4u * lid.x;
  storeRow(cBase, r0, n0, n1, acc[0], acc[1]);
  storeRow(cBase, r0 + 1u, n0, n1, acc[2], acc[3]);
  storeRow(cBase, r0 + 2u, n0, n1, acc[4], acc[5]);
  storeRow(cBase, r0 + 3u, n0, n1, acc[6], acc[7]);
  storeRow(cBase, r1, n0, n1, acc[8], acc[9]);
  storeRow(cBase, r1 + 1u, n0, n1, acc[10], acc[11]);
  storeRow(cBase, r1 + 2u, n0, n1, acc[12], acc[13]);
  storeRow(cBase, r1 + 3u, n0, n1, acc[14], acc[15]);
}
