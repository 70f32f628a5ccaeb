// Causal grouped-query attention over a KV cache (prefill, training and decode). A workgroup takes BQ consecutive
// query tokens x GH heads of one kv-head group (R = BQ * GH rows), streams K and V tiles of BK keys through
// workgroup memory (as vec4, rows zero-padded to D4 * 4) and keeps an online softmax, so no T x T scores exist.
// Tokens of one block that belong to different slots are handled in one pass per slot (passes.wgsl, appended).
// SPLIT (split-KV): workgroup z covers one key chunk and writes its unnormalised accumulator, running max and sum
// (attention_reduce). A sliding window (window < 2^32 - 1) limits token pos to keys pos - window + 1..pos.
// N tokens, H heads, KV kv-heads, D head dim (even), S slots, Tmax cache rows per slot.
struct Params { n: u32, h: u32, kv: u32, slots: u32, tmax: u32, nsplit: u32, chunk: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec2f>; // (N, H, D)
@group(0) @binding(2) var<storage, read> slotPos: array<u32>; // (N, 2)
@group(0) @binding(3) var<storage, read> kc: array<vec2f>; // (S, Tmax, KV, D)
@group(0) @binding(4) var<storage, read> vc: array<vec2f>; // (S, Tmax, KV, D)
@group(0) @binding(5) var<storage, read_write> o: array<vec2f>; // (N, H, D); SPLIT: (nsplit, N, H, D) unnormalised
@group(0) @binding(6) var<storage, read_write> lse: array<f32>; // (N, H); SPLIT: (nsplit, N, H, 2) max and sum

override D: u32 = 64;
override BQ: u32 = 4; // query tokens per workgroup (<= 32: a bit mask tracks them)
override GH: u32 = 4; // query heads per workgroup, a divisor of H / KV
override BK: u32 = 16; // keys per tile
override WG: u32 = 64;
override SPLIT: bool = false;
override R = BQ * GH;
override D4 = (D + 3u) / 4u;
override KS = D4 + 1u; // padded K/V tile row: threads reading different keys hit different banks
override NACC = (R * D4 + WG - 1u) / WG; // vec4 accumulators per thread (<= ACC)
const ACC = 4u;
const NEG = -3.0e38; // a masked score; exp(NEG - m) is 0
const NONE = 0xffffffffu;

var<workgroup> qs: array<vec4f, R * D4>; // q * scale
var<workgroup> kvs: array<vec4f, BK * KS>; // the K tile, then the V tile
var<workgroup> ps: array<f32, R * BK>; // scores, then probabilities
var<workgroup> rowM: array<f32, R>; // running max
var<workgroup> rowL: array<f32, R>; // running sum
var<workgroup> rowA: array<f32, R>; // rescale of the accumulator for this tile

// Elements 4 * d4 .. 4 * d4 + 3 of the row starting at vec2 index `at` of q (0), K (1) or V (2); 0 past D.
fn load4(src: u32, at: u32, d4: u32) -> vec4f {
  var x = vec4f(0.0);
  for (var h = 0u; h < 2u; h++) {
    let i = at + 2u * d4 + h;
    if (4u * d4 + 2u * h < D) {
      var v: vec2f;
      switch (src) {
        case 0u: { v = q[i]; }
        case 1u: { v = kc[i]; }
        default: { v = vc[i]; }
      }
      x[2u * h] = v.x;
      x[2u * h + 1u] = v.y;
    }
  }
  return x;
}

@compute @workgroup_size(WG)
fn attention_forward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let n0 = wid.x * BQ;
  let h0 = wid.y * GH;
  let kvh = h0 / (p.h / p.kv);
  let c = wid.z; // key chunk
  loadTokens(n0, tid);
  for (var e = tid; e < R * D4; e += WG) {
    let n = n0 + e / D4 / GH;
    var x = vec4f(0.0);
    if (n < p.n) { x = load4(0u, (n * p.h + h0 + e / D4 % GH) * D / 2u, e % D4) * p.scale; }
    qs[e] = x;
  }
  var done = pastN(n0); // tokens finished (or past N); the same in every invocation
  var acc: array<vec4f, ACC>;
  loop {
    workgroupBarrier(); // tokSlot is written, and the previous pass has read passMask
    planPass(done, tid);
    let mask = workgroupUniformLoad(&passMask);
    if (mask == 0u) { break; }
    let end = workgroupUniformLoad(&passEnd);
    let start = workgroupUniformLoad(&passStart);
    let slot = tokSlot[firstTrailingBit(mask)];
    let cb = min(c * p.chunk, end);
    let ke = select(min(cb + p.chunk, end), end, c + 1u == p.nsplit); // the last chunk runs to the end
    let kb = max(cb, start); // keys below every token's window are skipped
    for (var r = tid; r < R; r += WG) {
      rowM[r] = NEG;
      rowL[r] = 0.0;
    }
    for (var k = 0u; k < NACC; k++) { acc[k] = vec4f(0.0); }
    workgroupBarrier();
    for (var k0 = kb; k0 < ke; k0 += BK) {
      loadTile(1u, slot, kvh, k0, ke, tid);
      workgroupBarrier();
      for (var e = tid; e < R * BK; e += WG) {
        let r = e / BK;
        let key = k0 + e % BK;
        let i = r / GH;
        var sc = NEG;
        if ((mask & (1u << i)) != 0u && key < ke && key <= tokPos[i] && tokPos[i] - key < p.window) {
          sc = 0.0;
          for (var d = 0u; d < D4; d++) { sc += dot(qs[r * D4 + d], kvs[e % BK * KS + d]); }
        }
        ps[e] = sc;
      }
      workgroupBarrier();
      for (var r = tid; r < R; r += WG) {
        var mx = rowM[r];
        for (var j = 0u; j < BK; j++) { mx = max(mx, ps[r * BK + j]); }
        var sum = 0.0;
        for (var j = 0u; j < BK; j++) {
          let sc = ps[r * BK + j];
          var pr = 0.0;
          if (sc > NEG) { pr = exp(sc - mx); }
          ps[r * BK + j] = pr;
          sum += pr;
        }
        let a = exp(rowM[r] - mx);
        rowA[r] = a;
        rowL[r] = rowL[r] * a + sum;
        rowM[r] = mx;
      }
      loadTile(2u, slot, kvh, k0, ke, tid); // K is no longer read
      workgroupBarrier();
      for (var k = 0u; k < NACC; k++) {
        let e = tid + k * WG;
        if (e < R * D4) {
          let r = e / D4;
          var a = acc[k] * rowA[r];
          for (var j = 0u; j < BK; j++) { a += ps[r * BK + j] * kvs[j * KS + e % D4]; }
          acc[k] = a;
        }
      }
      workgroupBarrier();
    }
    for (var k = 0u; k < NACC; k++) {
      let e = tid + k * WG;
      let r = e / D4;
      if (e < R * D4 && (mask & (1u << (r / GH))) != 0u) {
        let row = (n0 + r / GH) * p.h + h0 + r % GH;
        let l = rowL[r];
        if (SPLIT) {
          let prow = c * p.n * p.h + row;
          store4(prow * D / 2u, e % D4, acc[k]);
          if (e % D4 == 0u) {
            lse[2u * prow] = rowM[r];
            lse[2u * prow + 1u] = l;
          }
        } else {
          store4(row * D / 2u, e % D4, select(vec4f(0.0), acc[k] / l, l > 0.0));
          if (e % D4 == 0u) { lse[row] = select(0.0, rowM[r] + log(l), l > 0.0); }
        }
      }
    }
    done |= mask;
  }
}

// Keys [k0, k0 + BK) of one slot and kv-head, from K (1) or V (2), into kvs; zeros past ke.
fn loadTile(src: u32, slot: u32, kvh: u32, k0: u32, ke: u32, tid: u32) {
  for (var e = tid; e < BK * D4; e += WG) {
    let key = k0 + e / D4;
    var x = vec4f(0.0);
    if (key < ke) { x = load4(src, ((slot * p.tmax + key) * p.kv + kvh) * D / 2u, e % D4); }
    kvs[e / D4 * KS + e % D4] = x;
  }
}

// Elements 4 * d4 .. of the output row starting at vec2 index `at` (the zero padding past D is dropped).
fn store4(at: u32, d4: u32, x: vec4f) {
  o[at + 2u * d4] = x.xy;
  if (4u * d4 + 2u < D) { o[at + 2u * d4 + 1u] = x.zw; }
}
