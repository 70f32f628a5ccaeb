// Register-blocked matmul C = alpha·op(A)·op(B) (+ bias) (+ C), no workgroup memory: each thread
// keeps 8 rows × 8 columns of C in registers. The variant that wins where workgroup memory is slow.
// Parameters, bindings, B_KIND and loadB: params.wgsl (prepended).

override PAIR_N: bool = false; // 16-bit B not transposed: a thread owns pairs of adjacent columns (one word)
override WGN: u32 = 4u; // threads along N; SwiftShader runs 4 consecutive invocations as one SIMD row
override WGM: u32 = 4u; // threads along M

var<private> acc: array<vec4f, 16>; // row i: columns j = 0..3 at 2i, j = 4..7 at 2i + 1
var<private> ar: array<vec4u, 2>; // offsets of the thread's 8 rows of A

// On SwiftShader every dynamically indexed load is a 4-lane gather, so the 16-bit paths below load one word per two
// elements (lo and hi: params.wgsl).
fn lo4(w: vec4u) -> vec4f { return vec4f(lo(w.x), lo(w.y), lo(w.z), lo(w.w)); }
fn hi4(w: vec4u) -> vec4f { return vec4f(hi(w.x), hi(w.y), hi(w.z), hi(w.w)); }

// acc += A[rows, k] ⊗ (b0, b1), with ka the offset of k along A.
fn rank1(ka: u32, b0: vec4f, b1: vec4f) {
  var x = a[ar[0].x + ka]; acc[0] += x * b0; acc[1] += x * b1;
  x = a[ar[0].y + ka]; acc[2] += x * b0; acc[3] += x * b1;
  x = a[ar[0].z + ka]; acc[4] += x * b0; acc[5] += x * b1;
  x = a[ar[0].w + ka]; acc[6] += x * b0; acc[7] += x * b1;
  x = a[ar[1].x + ka]; acc[8] += x * b0; acc[9] += x * b1;
  x = a[ar[1].y + ka]; acc[10] += x * b0; acc[11] += x * b1;
  x = a[ar[1].z + ka]; acc[12] += x * b0; acc[13] += x * b1;
  x = a[ar[1].w + ka]; acc[14] += x * b0; acc[15] += x * b1;
}

// Rows m0..m0+7 are contiguous; columns are interleaved (lane + WGN·j, or lane pairs with PAIR_N),
// so the lanes of a SIMD row read neighbouring B elements (coalesced on GPUs) and share A's.
@compute @workgroup_size(WGN, WGM)
fn matmul_forward(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u) {
  let tA = (p.flags & 1u) != 0u;
  let tB = (p.flags & 2u) != 0u;
  let aRow = select(p.lda, 1u, tA); // step between rows m of op(A)
  let aK = select(1u, p.lda, tA); // step along k
  let bCol = select(1u, p.ldb, tB);
  let bK = select(p.ldb, 1u, tB);
  let m0 = (wid.y * WGM + lid.y) * 8u;
  let base = wid.x * WGN * 8u;
  var nj = base + lid.x + WGN * vec4u(0u, 1u, 2u, 3u); // columns j = 0..3; j = 4..7 are nj + 4·WGN
  if (PAIR_N) { nj = base + 2u * lid.x + vec4u(0u, 1u, 2u * WGN, 2u * WGN + 1u); }
  // Out-of-range rows/columns are clamped for loading (always in bounds) and skipped when storing.
  let lastM = vec4u(p.M - 1u);
  let lastN = vec4u(p.N - 1u);
  let aBase = p.offA + wid.z * p.sA;
  let bBase = p.offB + wid.z * p.sB;
  let mi = m0 + vec4u(0u, 1u, 2u, 3u);
  ar[0] = aBase + min(mi, lastM) * aRow;
  ar[1] = aBase + min(mi + 4u, lastM) * aRow;
  let bc0 = bBase + min(nj, lastN) * bCol;
  let bc1 = bBase + min(nj + 4u * WGN, lastN) * bCol;
  acc = array<vec4f, 16>();
  // Word-aligned 16-bit B: every row of B starts on a word.
  let aligned = B_KIND != 0u && ((bBase | p.ldb) & 1u) == 0u;
  var k = 0u;
  if (aligned && tB) {
    // B is W (N, K): take k in pairs, one word per column.
    let u0 = bc0 / 2u;
    let u1 = bc1 / 2u;
    for (var q = 0u; k + 1u < p.K; k += 2u) {
      let w0 = vec4u(b[u0.x + q], b[u0.y + q], b[u0.z + q], b[u0.w + q]);
      let w1 = vec4u(b[u1.x + q], b[u1.y + q], b[u1.z + q], b[u1.w + q]);
      rank1(k * aK, lo4(w0), lo4(w1));
      rank1((k + 1u) * aK, hi4(w0), hi4(w1));
      q++;
    }
  } else if (aligned && PAIR_N) {
    // B is (K, N) and columns come in pairs: one word holds columns (j, j + 1).
    let u0 = bc0 / 2u;
    let u1 = bc1 / 2u;
    let step = p.ldb / 2u;
    var kb = 0u;
    for (; k < p.K; k++) {
      let w0 = b[u0.x + kb]; let w1 = b[u0.z + kb]; let w2 = b[u1.x + kb]; let w3 = b[u1.z + kb];
      rank1(k * aK, vec4f(lo(w0), hi(w0), lo(w1), hi(w1)), vec4f(lo(w2), hi(w2), lo(w3), hi(w3)));
      kb += step;
    }
  }
  // f32, the 16-bit tail, and unaligned 16-bit layouts: one element at a time.
  for (; k < p.K; k++) {
    let kb = k * bK;
    let b0 = vec4f(loadB(bc0.x + kb), loadB(bc0.y + kb), loadB(bc0.z + kb), loadB(bc0.w + kb));
    let b1 = vec4f(loadB(bc1.x + kb), loadB(bc1.y + kb), loadB(bc1.z + kb), loadB(bc1.w + kb));
    rank1(k * aK, b0, b1);
  }
  let t = acc;
  let cBase = p.offC + wid.z * p.sC;
  for (var i = 0u; i < 8u; i++) {
    let m = m0 + i;
    if (m >= p.M) { break; }
    for (var j = 0u; j < 8u; j++) {
      let n = select(nj[j % 4u], nj[j % 4u] + 4u * WGN, j >= 4u);
      if (n < p.N) {
        let idx = cBase + m * p.ldc + n;
        var v = p.alpha * t[2u * i + j / 4u][j % 4u];
        if ((p.flags & 4u) != 0u) { v += bias[p.offBias + n]; }
        if ((p.flags & 8u) != 0u) { v += c[idx]; }
        c[idx] = v;
      }
    }
  }
}
