// Rotary position embedding on rows (N, heads, D), HF rotate-half pairing (i, i + D/2), angle pos * invFreq[i].
// rope_backward is the same rotation by the negative angle. The *_inplace entries rotate y itself, since
// WebGPU forbids binding one buffer both read-only and writable in one dispatch. rope_qkv (inference) takes a
// packed q|k|v row per token, norms q and k per head where the model does (Qwen3, Gemma 3), rotates both, writes
// q out and k, v into the KV cache: what runs between the q/k/v projections and attention, in one dispatch.
struct Params { rows: u32, heads: u32, half: u32, posStride: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> pos: array<u32>; // (N, posStride): the position is the last column
@group(0) @binding(2) var<storage, read> invFreq: array<f32>; // (D/2)
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // (N, heads, D)
@group(0) @binding(4) var<storage, read> x: array<f32>; // (N, heads, D), out-of-place entries only

override WG: u32 = 256;
const NONE = 0xffffffffu;

// rope_qkv: its own uniform at binding 0 (no entry uses both), pos as (slot, pos) pairs, y the q out (N, H, D), x the
// packed rows (N, ldq) of H q heads, KV k heads and KV v heads of D, then these:
struct QkvParams {
  n: u32, h: u32, kv: u32, d: u32, // tokens, q heads, kv heads, head dim
  ldq: u32, slots: u32, tmax: u32, norm: u32, // norm 1: per-head RMSNorm of q and k
  eps: f32,
}
@group(0) @binding(0) var<uniform> pq: QkvParams;
@group(0) @binding(5) var<storage, read> qn: array<f32>; // (D) q_norm weight
@group(0) @binding(6) var<storage, read> kn: array<f32>; // (D) k_norm weight
@group(0) @binding(7) var<storage, read_write> kc: array<f32>; // (S, Tmax, KV, D)
@group(0) @binding(8) var<storage, read_write> vc: array<f32>; // (S, Tmax, KV, D)

// cosSin(a): cossin.wgsl (appended by index.ts).

// For invocation i over (N, heads, D/2): the flat indices of elements i and i + D/2 and the bits of cos and
// sign * sin of pos * invFreq[i], or NONE past the end.
fn pair(gid: vec3u, nwg: vec3u, sign: f32) -> vec4u {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.rows * p.half) { return vec4u(NONE); }
  let k = i % p.half;
  let row = i / p.half; // n * heads + head
  let n = row / p.heads;
  let cs = cosSin(f32(pos[n * p.posStride + p.posStride - 1u]) * invFreq[k]);
  let e = row * 2u * p.half + k;
  return vec4u(e, e + p.half, bitcast<u32>(cs.x), bitcast<u32>(sign * cs.y));
}

// (u, v) -> (u cos - v sin, v cos + u sin), written to y.
fn store(e: vec4u, u: f32, v: f32) {
  let c = bitcast<f32>(e.z);
  let s = bitcast<f32>(e.w);
  y[e.x] = u * c - v * s;
  y[e.y] = v * c + u * s;
}

@compute @workgroup_size(WG)
fn rope_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, 1.0);
  if (e.x != NONE) { store(e, x[e.x], x[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_forward_inplace(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, 1.0);
  if (e.x != NONE) { store(e, y[e.x], y[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, -1.0);
  if (e.x != NONE) { store(e, x[e.x], x[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_backward_inplace(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, -1.0);
  if (e.x != NONE) { store(e, y[e.x], y[e.y]); }
}

// Head row i of rope_qkv's input (token t, row r: q heads, then k heads, then v heads): where it starts in x, the
// token's position, whether its (slot, pos) is in the cache, and its first kv head's row there.
struct HeadRow { t: u32, r: u32, src: u32, tp: u32, cached: bool, row: u32 }

fn headRow(i: u32) -> HeadRow {
  let heads = pq.h + 2u * pq.kv;
  let t = i / heads;
  let r = i % heads;
  let slot = pos[2u * t];
  let tp = pos[2u * t + 1u];
  return HeadRow(t, r, t * pq.ldq + r * pq.d, tp, slot < pq.slots && tp < pq.tmax, (slot * pq.tmax + tp) * pq.kv);
}

// Elements first, first + step, ... of a v row into the v cache (nothing for a token outside it).
fn copyV(h: HeadRow, first: u32, step: u32) {
  if (!h.cached) { return; }
  let dst = (h.row + h.r - pq.h - pq.kv) * pq.d;
  for (var e = first; e < pq.d; e += step) { vc[dst + e] = x[h.src + e]; }
}

// Σ x² over elements first, first + step, ... of the row.
fn sumSq(h: HeadRow, first: u32, step: u32) -> f32 {
  var ss = 0.0;
  for (var e = first; e < pq.d; e += step) { ss += x[h.src + e] * x[h.src + e]; }
  return ss;
}

// Pairs (k, k + D/2), k = first, first + step, ... of a q or k row, times rs and the norm weight (pq.norm) and
// rotated to the token's position, into q out or the k cache.
fn rotateRow(h: HeadRow, rs: f32, first: u32, step: u32) {
  let isQ = h.r < pq.h;
  let half = pq.d / 2u;
  let dst = select((h.row + h.r - pq.h) * pq.d, (h.t * pq.h + h.r) * pq.d, isQ);
  for (var k = first; k < half; k += step) {
    var u = x[h.src + k] * rs;
    var v = x[h.src + k + half] * rs;
    if (pq.norm != 0u) {
      u *= select(kn[k], qn[k], isQ);
      v *= select(kn[k + half], qn[k + half], isQ);
    }
    let cs = cosSin(f32(h.tp) * invFreq[k]);
    let a = u * cs.x - v * cs.y;
    let b = v * cs.x + u * cs.y;
    if (isQ) { y[dst + k] = a; y[dst + k + half] = b; } else { kc[dst + k] = a; kc[dst + k + half] = b; }
  }
}

// One thread per head row of a token: tokens with a slot or pos out of range (padding) still get q, but write nothing
// into the cache.
@compute @workgroup_size(WG)
fn rope_qkv(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= pq.n * (pq.h + 2u * pq.kv)) { return; }
  let h = headRow(i);
  if (h.r >= pq.h + pq.kv) {
    copyV(h, 0u, 1u);
    return;
  }
  if (h.r >= pq.h && !h.cached) { return; }
  var rs = 1.0;
  if (pq.norm != 0u) { rs = inverseSqrt(sumSq(h, 0u, 1u) / f32(pq.d) + pq.eps); }
  rotateRow(h, rs, 0u, 1u);
}

// rope_qkv's "gpu" layout: a workgroup of WG threads a head row, each thread a few of its (k, k + D/2) pairs (or, in
// a v row, of its elements), the per-head norm's Σ x² shared through workgroup memory. One thread a row (above)
// leaves a decode batch's few rows to few threads, each walking D/2 pairs in turn.
var<workgroup> ssPart: array<f32, WG>;

@compute @workgroup_size(WG)
fn rope_qkv_wide(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u,
                 @builtin(num_workgroups) nwg: vec3u) {
  let heads = pq.h + 2u * pq.kv;
  let i = wid.x + wid.y * nwg.x; // the head row
  if (i >= pq.n * heads) { return; } // grid padding: the whole workgroup
  let r = i % heads; // (from the workgroup's id: the branches below are uniform, as the barriers need)
  let h = headRow(i);
  if (r >= pq.h + pq.kv) {
    copyV(h, lid, WG);
    return;
  }
  var rs = 1.0;
  if (pq.norm != 0u) {
    ssPart[lid] = sumSq(h, lid, WG);
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
      if (lid < s) { ssPart[lid] += ssPart[lid + s]; }
      workgroupBarrier();
    }
    rs = inverseSqrt(ssPart[0] / f32(pq.d) + pq.eps);
  }
  if (r >= pq.h && !h.cached) { return; }
  rotateRow(h, rs, lid, WG);
}

// rope_backward_pack (training's backward of the q|k|v product): dq (N, H, D) and dk (N, KV, D) rotated back (the
// inverse rotation at each token's position), and dv, side by side in the packed rows of y (N, ldq), as the q|k|v
// product holds them, for one matmul back through the three weights. One invocation a (token, head row, pair).
@group(0) @binding(4) var<storage, read> dqIn: array<f32>; // (N, H, D)
@group(0) @binding(5) var<storage, read> dkIn: array<f32>; // (N, KV, D)
@group(0) @binding(6) var<storage, read> dvIn: array<f32>; // (N, KV, D)

@compute @workgroup_size(WG)
fn rope_backward_pack(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let heads = pq.h + 2u * pq.kv;
  let half = pq.d / 2u;
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= pq.n * heads * half) { return; }
  let k = i % half;
  let row = i / half;
  let t = row / heads;
  let r = row % heads;
  let dst = t * pq.ldq + r * pq.d + k;
  if (r >= pq.h + pq.kv) {
    let src = (t * pq.kv + r - pq.h - pq.kv) * pq.d + k;
    y[dst] = dvIn[src];
    y[dst + half] = dvIn[src + half];
    return;
  }
  var u: f32;
  var v: f32;
  if (r < pq.h) {
    let src = (t * pq.h + r) * pq.d + k;
    u = dqIn[src];
    v = dqIn[src + half];
  } else {
    let src = (t * pq.kv + r - pq.h) * pq.d + k;
    u = dkIn[src];
    v = dkIn[src + half];
  }
  let cs = cosSin(f32(pos[2u * t + 1u]) * invFreq[k]);
  y[dst] = u * cs.x + v * cs.y;
  y[dst + half] = v * cs.x - u * cs.y;
}
