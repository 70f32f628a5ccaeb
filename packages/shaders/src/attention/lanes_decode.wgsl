// Decode attention, "lanes" variant (GPUs with subgroups; same contract as attention_forward without split, for
// any number of tokens, each alone in its workgroup row): a workgroup takes one token and GH heads of one kv-head
// group. Each head has S x P adjacent lanes of a subgroup: S of them split the token's keys (lane s takes keys
// j0 + s, j0 + s + S, ...), and P split each row of q, K, V and the output (lane `part` holds vec4 part, part + P,
// ...; NV each). A score's P partial dots meet by subgroupShuffleXor; each lane keeps an online softmax over its
// keys in registers, reading K and V straight from the cache; at the end the S partial softmaxes of a head merge
// by shuffles too. No workgroup memory and no barriers: built for a short chain of dependent steps, which is what a
// decode step's few, small workgroups wait on. SPLIT (split-KV): workgroup z covers one chunk of keys and writes
// its unnormalised output, max and sum for attention_reduce, as attention_forward's SPLIT does. A sliding window
// (window < 2^32 - 1) limits token pos to keys pos - window + 1..pos. N tokens, H heads, KV kv-heads, D head dim
// (a multiple of 4P), S slots, Tmax cache rows.
enable subgroups;
diagnostic(off, subgroup_uniformity); // every lane of a head runs the same loop and shuffles

struct Params { n: u32, h: u32, kv: u32, slots: u32, tmax: u32, nsplit: u32, chunk: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (N, H, D)
@group(0) @binding(2) var<storage, read> slotPos: array<u32>; // (N, 2)
@group(0) @binding(3) var<storage, read> kc: array<vec4f>; // (S, Tmax, KV, D)
@group(0) @binding(4) var<storage, read> vc: array<vec4f>; // (S, Tmax, KV, D)
@group(0) @binding(5) var<storage, read_write> o: array<vec4f>; // (N, H, D); SPLIT: (nsplit, N, H, D) unnormalised
@group(0) @binding(6) var<storage, read_write> lse: array<f32>; // (N, H); SPLIT: (nsplit, N, H, 2) max and sum

override D: u32 = 64;
override GH: u32 = 4; // heads per workgroup, a divisor of H / KV
override S: u32 = 8; // lanes splitting the keys (a power of two)
override P: u32 = 4; // lanes splitting a row (a power of two); S * P at most the device's smallest subgroup
override SPLIT: bool = false;
override WG = GH * S * P;
override D4 = D / 4u;
override NV = D4 / P; // vec4 of a row per lane (<= MAXNV)
const MAXNV = 16u;
const NEG = -3.0e38; // no score yet

// Sum and max of x over the lanes whose index differs from this one's in the bits of [lo, hi) (powers of two).
fn sumOver(x: f32, lo: u32, hi: u32) -> f32 {
  var s = x;
  for (var m = lo; m < hi; m <<= 1u) { s += subgroupShuffleXor(s, m); }
  return s;
}
fn sumOver4(x: vec4f, lo: u32, hi: u32) -> vec4f {
  var s = x;
  for (var m = lo; m < hi; m <<= 1u) { s += subgroupShuffleXor(s, m); }
  return s;
}
fn maxOver(x: f32, lo: u32, hi: u32) -> f32 {
  var s = x;
  for (var m = lo; m < hi; m <<= 1u) { s = max(s, subgroupShuffleXor(s, m)); }
  return s;
}

@compute @workgroup_size(WG)
fn attention_decode_lanes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let n = wid.x;
  let head = wid.y * GH + tid / (S * P);
  let kvh = head / (p.h / p.kv);
  let part = tid % P;
  let s = tid / P % S; // this lane's share of the keys
  let slot = slotPos[2u * n];
  let pos = slotPos[2u * n + 1u];
  let ok = slot < p.slots && pos < p.tmax; // the same for the whole workgroup
  let row = n * p.h + head;
  let ob = row * D4 + part; // this lane's first vec4 of q and o
  var qr: array<vec4f, MAXNV>;
  var acc: array<vec4f, MAXNV>;
  var m = NEG;
  var l = 0.0;
  if (ok) {
    for (var c = 0u; c < NV; c++) { qr[c] = q[ob + c * P] * p.scale; }
    // Keys [lo, hi): from the window's start to pos, within chunk wid.z under SPLIT (the last runs to the end).
    var lo = select(0u, pos + 1u - p.window, pos + 1u > p.window);
    var hi = pos + 1u;
    if (SPLIT) {
      lo = max(lo, wid.z * p.chunk);
      if (wid.z + 1u < p.nsplit) { hi = min(hi, (wid.z + 1u) * p.chunk); }
    }
    let steps = select(0u, (hi - lo + S - 1u) / S, hi > lo); // the same for every lane: the shuffles stay converged
    for (var i = 0u; i < steps; i++) {
      let j = lo + i * S + s;
      let valid = j < hi;
      let kb = ((slot * p.tmax + min(j, hi - 1u)) * p.kv + kvh) * D4 + part;
      var d = 0.0;
      for (var c = 0u; c < NV; c++) { d += dot(qr[c], kc[kb + c * P]); }
      d = sumOver(d, 1u, P);
      let mNew = select(m, max(m, d), valid);
      let a = exp(m - mNew);
      let e = select(0.0, exp(d - mNew), valid);
      l = l * a + e;
      for (var c = 0u; c < NV; c++) { acc[c] = acc[c] * a + e * vc[kb + c * P]; }
      m = mNew;
    }
  }
  // The head's S partial softmaxes merge: each scaled to the largest running max.
  let mAll = maxOver(m, P, S * P);
  let f = select(0.0, exp(m - mAll), m > NEG);
  let lAll = sumOver(l * f, P, S * P);
  for (var c = 0u; c < NV; c++) { acc[c] = sumOver4(acc[c] * f, P, S * P); }
  if (s == 0u && SPLIT) {
    let prow = wid.z * p.n * p.h + row;
    for (var c = 0u; c < NV; c++) { o[prow * D4 + part + c * P] = acc[c]; }
    if (part == 0u) {
      lse[2u * prow] = mAll;
      lse[2u * prow + 1u] = lAll;
    }
  } else if (s == 0u) {
    for (var c = 0u; c < NV; c++) { o[ob + c * P] = select(vec4f(0.0), acc[c] / lAll, lAll > 0.0); }
    if (part == 0u) { lse[row] = select(0.0, mAll + log(lAll), lAll > 0.0); }
  }
}
