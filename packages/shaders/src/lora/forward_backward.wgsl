// LoRA's products as one small strided matmul: out[i, j] (+)= scale * sum_k P[i, k] * Q[k, j], each operand
// at an element offset with its own strides. Forward (t = x·Aᵀ, y += s·t·Bᵀ) and backward (dt, dB, dA, dx)
// are all this shape with R as J or K, so one kernel serves both entry points. The gradients dA and dB sum over
// every token (K = N) into a few outputs (I x R): their k can be split over `splits` workgroups, each writing its
// partial sums (split s at oOff + s * oSplit), which lora_reduce then adds up in order. One dispatch runs up to 3
// such problems on the same three buffers (the targets that share an input: q, k, v, or gate, up), each from its
// first workgroup on.
struct Problem {
  I: u32, J: u32, K: u32, tilesI: u32,
  pOff: u32, pi: u32, pk: u32, tiles: u32,
  qOff: u32, qk: u32, qj: u32, accumulate: u32,
  oOff: u32, oi: u32, oj: u32, scale: f32,
  splits: u32, kChunk: u32, oSplit: u32, first: u32, // first: the problem's first workgroup
}
struct Params { n: u32, pad0: u32, pad1: u32, pad2: u32, pr: array<Problem, 3> }
@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> P: array<f32>; // (I, K) at pOff, strides (pi, pk)
@group(0) @binding(2) var<storage, read> Q: array<f32>; // (K, J) at qOff, strides (qk, qj)
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // (I, J) at oOff, strides (oi, oj)

// A workgroup is WI x WJ x WK threads; a thread owns TM rows (i, WI apart) x 4 columns (j, WJ apart),
// so neighbouring threads touch neighbouring elements. WK threads split k and are summed in a fixed tree.
override WI: u32 = 1;
override WJ: u32 = 1;
override WK: u32 = 64; // a power of two
override TM: u32 = 4; // 1..TMAX
const TMAX = 4u;

var<workgroup> red: array<vec4f, WI * WJ * WK * TM>;

fn lora_matmul(l: u32, wid: vec3u, nwg: vec3u) {
  let all = wid.x + wid.y * nwg.x;
  var which = 0u;
  for (var i = 1u; i < u.n; i++) { if (all >= u.pr[i].first) { which = i; } }
  let p = u.pr[which];
  let flat = all - p.first;
  if (flat >= p.tiles * p.splits) { return; }
  let split = flat / p.tiles;
  let tile = flat % p.tiles;
  let kEnd = min(p.K, (split + 1u) * p.kChunk);
  let wi = l % WI;
  let wj = (l / WI) % WJ;
  let wk = l / (WI * WJ);
  let i0 = (tile % p.tilesI) * WI * TM + wi;
  let j0 = (tile / p.tilesI) * WJ * 4u + wj;
  // Loads use indices clamped into range; results for rows or columns past the end are never stored.
  let jj = min(vec4u(j0, j0 + WJ, j0 + 2u * WJ, j0 + 3u * WJ), vec4u(p.J - 1u));
  let qcol = p.qOff + jj * p.qj;
  // The TM rows are spelled out with constant indices: SwiftShader turns a private array indexed by a loop variable
  // into per-lane gathers and scatters, which made this loop several times slower there (TMAX = 4).
  let prow = p.pOff + min(i0 + vec4u(0u, 1u, 2u, 3u) * WI, vec4u(p.I - 1u)) * p.pi;
  var acc: array<vec4f, TMAX>;
  for (var k = split * p.kChunk + wk; k < kEnd; k += WK) {
    let qk = k * p.qk;
    let q = vec4f(Q[qcol.x + qk], Q[qcol.y + qk], Q[qcol.z + qk], Q[qcol.w + qk]);
    let pk = k * p.pk;
    acc[0] += P[prow.x + pk] * q;
    if (TM > 1u) { acc[1] += P[prow.y + pk] * q; }
    if (TM > 2u) { acc[2] += P[prow.z + pk] * q; }
    if (TM > 3u) { acc[3] += P[prow.w + pk] * q; }
  }
  if (WK > 1u) {
    let plane = WI * WJ * TM;
    let slot = (wi + wj * WI) * TM;
    for (var m = 0u; m < TM; m++) { red[wk * plane + slot + m] = acc[m]; }
    for (var s = WK / 2u; s > 0u; s >>= 1u) {
      workgroupBarrier();
      if (wk < s) {
        for (var m = 0u; m < TM; m++) { red[wk * plane + slot + m] += red[(wk + s) * plane + slot + m]; }
      }
    }
    workgroupBarrier();
    if (wk != 0u) { return; }
    for (var m = 0u; m < TM; m++) { acc[m] = red[slot + m]; }
  }
  for (var m = 0u; m < TM; m++) {
    let i = i0 + m * WI;
    if (i >= p.I) { break; }
    for (var c = 0u; c < 4u; c++) {
      let j = j0 + c * WJ;
      if (j >= p.J) { break; }
      let o = p.oOff + split * p.oSplit + i * p.oi + j * p.oj;
      let v = p.scale * acc[m][c];
      if (p.accumulate != 0u) { out[o] += v; } else { out[o] = v; }
    }
  }
}

@compute @workgroup_size(WI * WJ * WK)
fn lora_forward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  lora_matmul(l, wid, nwg);
}

@compute @workgroup_size(WI * WJ * WK)
fn lora_backward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  lora_matmul(l, wid, nwg);
}

// out[i, j] (+)= the sum over s of part[partOff + s * I * J + i * J + j], s in order (a split lora_matmul's partial
// sums), for up to 3 problems, each from its first element (of all the dispatch's threads) on.
struct Reduce {
  I: u32, J: u32, S: u32, accumulate: u32,
  oOff: u32, oi: u32, oj: u32, partOff: u32,
  first: u32, pad0: u32, pad1: u32, pad2: u32, // first: the problem's first element
}
struct ReduceParams { n: u32, pad0: u32, pad1: u32, pad2: u32, pr: array<Reduce, 3> }
@group(0) @binding(0) var<uniform> ur: ReduceParams;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> sums: array<f32>; // lora_matmul's out

@compute @workgroup_size(64)
fn lora_reduce(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let all = gid.x + gid.y * nwg.x * 64u;
  var which = 0u;
  for (var i = 1u; i < ur.n; i++) { if (all >= ur.pr[i].first) { which = i; } }
  let pr = ur.pr[which];
  let e = all - pr.first;
  let IJ = pr.I * pr.J;
  if (e >= IJ) { return; }
  var v = 0.0;
  for (var s = 0u; s < pr.S; s++) { v += part[pr.partOff + s * IJ + e]; }
  let o = pr.oOff + (e / pr.J) * pr.oi + (e % pr.J) * pr.oj;
  if (pr.accumulate != 0u) { sums[o] += v; } else { sums[o] = v; }
}
