// Causal grouped-query attention, "lanes" variant (GPUs with subgroups; same contract as attention_forward without
// split). A workgroup takes BQ consecutive query tokens x GH heads of one kv-head group; each (token, head) row has P
// adjacent lanes of a subgroup, lane `part` holding vec4 part, part + P, ... of the row's q and output (NV each).
// K and V tiles of BK keys are shared through workgroup memory, read by every row at once (one address per vec4 and
// lane part, so no bank conflicts). A score's P partial dots meet by subgroupShuffleXor, and the online softmax stays
// in each row's registers: two barriers a tile, none around the softmax. Tokens of one block in different slots run
// one pass per slot (passes.wgsl, appended). A sliding window (window < 2^32 - 1) limits token pos to keys
// pos - window + 1..pos. N tokens, H heads, KV kv-heads, D head dim (a multiple of 4P), S slots, Tmax cache rows.
enable subgroups;
diagnostic(off, subgroup_uniformity); // every lane of a row runs the same shuffles; rows differ only in what they keep

struct Params { n: u32, h: u32, kv: u32, slots: u32, tmax: u32, nsplit: u32, chunk: u32, scale: f32, window: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>; // (N, H, D)
@group(0) @binding(2) var<storage, read> slotPos: array<u32>; // (N, 2)
@group(0) @binding(3) var<storage, read> k: array<vec4f>; // the K cache (S, Tmax, KV, D)
@group(0) @binding(4) var<storage, read> v: array<vec4f>; // the V cache (S, Tmax, KV, D)
@group(0) @binding(5) var<storage, read_write> o: array<vec4f>; // (N, H, D)
@group(0) @binding(6) var<storage, read_write> lse: array<f32>; // (N, H)

override D: u32 = 64;
override BQ: u32 = 4; // query tokens per workgroup (<= 32: a bit mask tracks them)
override GH: u32 = 4; // query heads per workgroup, a divisor of H / KV
override BK: u32 = 32; // keys per tile (<= MAXBK)
override P: u32 = 4; // lanes per row: a power of two, at most the device's smallest subgroup
override WG = BQ * GH * P;
override D4 = D / 4u;
override NV = D4 / P; // vec4 of a row per lane (<= MAXNV)
const MAXNV = 16u;
const MAXBK = 64u;
const NEG = -3.0e38; // a masked score; exp(NEG - m) is 0
const NONE = 0xffffffffu;

var<workgroup> ks: array<vec4f, BK * D4>;
var<workgroup> vs: array<vec4f, BK * D4>;


@compute @workgroup_size(WG)
fn attention_forward_lanes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) tid: u32) {
  let n0 = wid.x * BQ;
  let h0 = wid.y * GH;
  let kvh = h0 / (p.h / p.kv);
  let part = tid % P;
  let i = tid / P / GH; // this row's token in the block
  let tok = n0 + i;
  let ob = (tok * p.h + h0 + tid / P % GH) * D4 + part; // this lane's first vec4 of q and o
  loadTokens(n0, tid);
  var qr: array<vec4f, MAXNV>;
  var acc: array<vec4f, MAXNV>;
  if (tok < p.n) {
    for (var c = 0u; c < NV; c++) { qr[c] = q[ob + c * P] * p.scale; }
  }
  var done = pastN(n0); // tokens finished (or past N); the same in every invocation
  var sc: array<f32, MAXBK>;
  loop {
    workgroupBarrier(); // tokSlot is written, and the previous pass has read passMask
    planPass(done, tid);
    let mask = workgroupUniformLoad(&passMask);
    if (mask == 0u) { break; }
    let ke = workgroupUniformLoad(&passEnd);
    let kb = workgroupUniformLoad(&passStart);
    let slot = tokSlot[firstTrailingBit(mask)];
    let mine = (mask & (1u << i)) != 0u;
    let pos = tokPos[i];
    var m = NEG;
    var l = 0.0;
    for (var c = 0u; c < NV; c++) { acc[c] = vec4f(0.0); }
    for (var k0 = kb; k0 < ke; k0 += BK) {
      workgroupBarrier(); // the previous tile is consumed
      stageKv(slot * p.tmax, k0, ke, kvh, tid);
      workgroupBarrier();
      var mx = m;
      for (var j = 0u; j < BK; j++) {
        var d = 0.0;
        for (var c = 0u; c < NV; c++) { d += dot(qr[c], ks[j * D4 + part + c * P]); }
        d = rowSum(d);
        let key = k0 + j;
        let s = select(NEG, d, mine && key < ke && key <= pos && pos - key < p.window);
        sc[j] = s;
        mx = max(mx, s);
      }
      let a = exp(m - mx);
      l *= a;
      for (var c = 0u; c < NV; c++) { acc[c] *= a; }
      for (var j = 0u; j < BK; j++) {
        let pr = select(0.0, exp(sc[j] - mx), sc[j] > NEG);
        l += pr;
        for (var c = 0u; c < NV; c++) { acc[c] += pr * vs[j * D4 + part + c * P]; }
      }
      m = mx;
    }
    if (mine) {
      for (var c = 0u; c < NV; c++) { o[ob + c * P] = select(vec4f(0.0), acc[c] / l, l > 0.0); }
      if (part == 0u) { lse[(ob - part) / D4] = select(0.0, m + log(l), l > 0.0); }
    }
    done |= mask;
  }
}
