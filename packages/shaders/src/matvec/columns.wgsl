// Decode matvec, columns variant (same contract, fused options and epilogue as forward.wgsl), for decode steps of
// many rows (a batch of 8 to 64 sequences): W is read once for up to 32 rows of x, where the other variants take 4
// or 8 a pass. Each lane owns one output column; a workgroup is KS slices of K by CW columns, so a load of x is the
// same address across a slice's lanes (one broadcast serves CW columns) while each lane reads its own row of W 16
// bytes at a time, two loads in flight. The slices' sums meet in workgroup memory at the end of a pass, in KQ slots
// that groups of slices add into in turn (8.5 KiB at 32 rows, 16.5 KiB gated). With NORM each lane also sums x² of
// its share of the rows (rows c, c + CW, ... of the pass), so the norm's cost does not grow with the columns. Needs
// every row of W and of x to start on 16 bytes (index.ts runs the workgroup variant otherwise). Parameters,
// bindings and the epilogue: common.wgsl; half4: half4.wgsl (both appended).
@group(0) @binding(1) var<storage, read> x: array<vec4f>; // rows start on 16 bytes (offX, ldx multiples of 4)
@group(0) @binding(2) var<storage, read> w: array<vec4u>; // 4 f32, or 8 bf16/f16, a vector
@group(0) @binding(4) var<storage, read> nw: array<vec4f>; // (K) RMSNorm weight
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16
override MT: u32 = 8u; // rows of x per pass: a power of two, 1..32
override NORM: bool = false;
override GATE: u32 = 0u; // 0 none, 1 silu, 2 GELU tanh: y = act(seg 0) * seg 1
override RED: u32 = 512u; // index.ts: KQ · CW · MT, twice that with GATE
const CW = 16u; // columns a workgroup, one a lane
const KS = 16u; // slices of K a workgroup (KS · CW = 256 threads)
const KQ = 4u; // the slices' sums meet in KQ slots: KS / KQ rounds, each group of KQ slices adds into them
const SQ = 32u; // rows of x² sums kept a slice (the most MT)

var<workgroup> red: array<f32, RED>; // (halves, MT, KQ, CW): the slices' sums, gate then up
var<workgroup> redSq: array<f32, KQ * SQ>; // NORM: (KQ, rows) the slices' Σ x²

var<private> acc: array<f32, 32>;
var<private> accUp: array<f32, 32>;
var<private> sq: array<f32, 2>;

// Adds the vector of the column's row (v0) and of its up row (v1) that start at element k into the pass's sums; `on`
// is 0 for a vector past the row's end (k was clamped to the row's last vector, so every read stays in bounds). The
// pass's row i of x starts at vector xb + min(i, lastI) · ld4 (rows past M load row M - 1; their sums are dropped).
// c: the lane's column, for its share of the x² sums.
fn accumulate(v0: vec4u, v1: vec4u, k: u32, on: f32, xb: u32, ld4: u32, lastI: u32, c: u32) {
  let E = select(8u, 4u, W_KIND == 0u);
  for (var h = 0u; h < E / 4u; h++) {
    let kv = xb + k / 4u + h; // row 0's vector of x at element k + 4h
    let hi = h == 1u;
    var w0 = on * select(half4(v0, hi), bitcast<vec4f>(v0), W_KIND == 0u);
    var w1 = vec4f();
    if (GATE != 0u) { w1 = on * select(half4(v1, hi), bitcast<vec4f>(v1), W_KIND == 0u); }
    if (NORM) {
      let nv = nw[k / 4u + h];
      w0 *= nv;
      w1 *= nv;
    }
    for (var i = 0u; i < MT; i++) {
      let xv = x[kv + min(i, lastI) * ld4];
      acc[i] += dot(xv, w0);
      if (GATE != 0u) { accUp[i] += dot(xv, w1); }
    }
    if (NORM) {
      for (var j = 0u; j * CW < MT; j++) {
        let xv = x[kv + min(c % MT + j * CW, lastI) * ld4];
        sq[j] += on * dot(xv, xv);
      }
    }
  }
}

@compute @workgroup_size(256)
fn matvec_forward_columns(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3u,
                          @builtin(num_workgroups) nwg: vec3u) {
  let first = (wid.x + wid.y * nwg.x) * CW;
  if (first >= p.N) { return; } // whole workgroup: grid padding
  let c = tid % CW;
  let s = tid / CW;
  let nc = min(first + c, p.N - 1u); // columns past N load a valid row; their sums are dropped
  let E = select(8u, 4u, W_KIND == 0u); // elements a vector
  let r0 = rowOf(nc, false) / E; // vector index of the row's start
  let r1 = select(r0, rowOf(nc, true) / E, GATE != 0u);
  let V = p.K / E; // vectors a row (K is a multiple of E)
  for (var m0 = wid.z * MT; m0 < p.M; m0 += MT * nwg.z) { // row blocks: z of the grid (index.ts rowBlocks)
    for (var i = 0u; i < MT; i++) {
      acc[i] = 0.0;
      if (GATE != 0u) { accUp[i] = 0.0; }
    }
    sq = array<f32, 2>(0.0, 0.0);
    let xb = (p.offX + m0 * p.ldx) / 4u;
    let ld4 = p.ldx / 4u;
    let lastI = min(MT, p.M - m0) - 1u;
    // Slice s takes vectors s, s + KS, ...: two at a time, both loads issued before either is used.
    for (var v = s; v < V; v += 2u * KS) {
      let v1 = min(v + KS, V - 1u);
      let a0 = w[r0 + v];
      let a1 = w[r0 + v1];
      var b0 = vec4u();
      var b1 = vec4u();
      if (GATE != 0u) {
        b0 = w[r1 + v];
        b1 = w[r1 + v1];
      }
      accumulate(a0, b0, v * E, 1.0, xb, ld4, lastI, c);
      accumulate(a1, b1, v1 * E, select(0.0, 1.0, v + KS < V), xb, ld4, lastI, c);
    }
    // The last KQ slices write their sums, then each group of KQ before them adds its own: (KQ, ...) entries
    // instead of (KS, ...).
    for (var round = 0u; round < KS / KQ; round++) {
      if (s / KQ == KS / KQ - 1u - round) {
        let q = s % KQ;
        for (var i = 0u; i < MT; i++) {
          let a = (i * KQ + q) * CW + c;
          red[a] = select(red[a], 0.0, round == 0u) + acc[i];
          if (GATE != 0u) {
            let b = ((MT + i) * KQ + q) * CW + c;
            red[b] = select(red[b], 0.0, round == 0u) + accUp[i];
          }
        }
        if (NORM && c < MT) {
          for (var j = 0u; j * CW < MT; j++) {
            let a = q * SQ + c + j * CW;
            redSq[a] = select(redSq[a], 0.0, round == 0u) + sq[j];
          }
        }
      }
      workgroupBarrier();
    }
    for (var o = tid; o < MT * CW; o += 256u) {
      let i = o / CW;
      let cc = o % CW;
      let m = m0 + i;
      let n = first + cc;
      if (m < p.M && n < p.N) {
        var rs = 1.0;
        if (NORM) {
          var ss = 0.0;
          for (var q = 0u; q < KQ; q++) { ss += redSq[q * SQ + i]; }
          rs = inverseSqrt(ss / f32(p.K) + p.eps);
        }
        var sum = 0.0;
        for (var q = 0u; q < KQ; q++) { sum += red[(i * KQ + q) * CW + cc]; }
        if (GATE != 0u) {
          var up = 0.0;
          for (var q = 0u; q < KQ; q++) { up += red[((MT + i) * KQ + q) * CW + cc]; }
          store(m, n, act(finish(m, 0u, n, rs * sum)) * finish(m, 1u, n, rs * up));
        } else if (ROPE_P > 0u) { // CW = 2 ROPE_P: columns cc and cc + ROPE_P are a pair
          let pc = (cc + ROPE_P) % CW;
          var partner = 0.0;
          for (var q = 0u; q < KQ; q++) { partner += red[(i * KQ + q) * CW + pc]; }
          ropeOut(m, n, rs * sum, rs * partner);
        } else {
          let sg = segOf(n);
          store(m, n, finish(m, sg, n - p.seg[sg].base, rs * sum));
        }
      }
    }
    workgroupBarrier(); // red is reused by the next pass
  }
}
