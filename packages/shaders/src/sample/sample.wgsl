// Decode sampling, one workgroup per row of logits (B, V): temperature (<= 0: greedy argmax), top-k and
// top-p as a threshold found by bisection with parallel counting (no sort), an optional allowed-token
// bitmask, and inverse-CDF sampling with a parallel prefix sum; the uniform comes from a counter-based
// hash of (seed, step, stream), so a row replays exactly. Writes the token id and its logprob. Rows without top-k
// or top-p can also be split over workgroups (sample_partial, then sample_pick, at the end of this file).
struct Params {
  b: u32,
  v: u32,
  mask_words: u32, // u32 words per bitmask row, ceil(V / 32)
  has_mask: u32,
  lp_at_temperature: u32, // 0: logprob under softmax(logits); 1: under softmax(logits / T)
  splits: u32, // sample_partial / sample_pick: chunks a row is split into (<= WG)
}
struct Row { temperature: f32, top_k: u32, top_p: f32, seed: u32, step: u32, stream: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // (B, V)
@group(0) @binding(2) var<storage, read> rows: array<Row>; // (B,)
@group(0) @binding(3) var<storage, read> mask: array<u32>; // (B, mask_words), bit j%32 of word j/32: allowed
@group(0) @binding(4) var<storage, read_write> tokens: array<u32>; // (B,)
@group(0) @binding(5) var<storage, read_write> logprobs: array<f32>; // (B,)

override WG: u32 = 256; // a power of two
const LOWEST: f32 = -3e38; // below any logit / T in practice
const NONE: u32 = 0xffffffffu;

var<workgroup> ra: array<vec4f, WG>; // pass 1: (max, sum exp) for the logprob; (max z, min z) allowed
var<workgroup> rb: array<vec2u, WG>; // pass 1: (argmax z, allowed count)
var<workgroup> rm: array<f32, WG>; // threshold passes: kept mass
var<workgroup> rk: array<vec3u, WG>; // threshold passes: (count, min key >= mid, max key < mid)
var<workgroup> lo_hi: vec2u; // bisection interval over keys
var<workgroup> last_nonempty: atomic<u32>;

// Order-preserving map of f32 to u32, so thresholds can be bisected over integers.
fn key(z: f32) -> u32 {
  let b = bitcast<u32>(z);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// PCG-style 3-D hash (Jarzynski & Olano 2020): uniform bits from (seed, step, stream).
fn pcg3d(a: vec3u) -> vec3u {
  var v = a * 1664525u + 1013904223u;
  v.x += v.y * v.z; v.y += v.z * v.x; v.z += v.x * v.y;
  v ^= v >> vec3u(16u);
  v.x += v.y * v.z; v.y += v.z * v.x; v.z += v.x * v.y;
  return v;
}

fn allowed(row: u32, j: u32) -> bool {
  return p.has_mask == 0u || ((mask[row * p.mask_words + (j >> 5u)] >> (j & 31u)) & 1u) != 0u;
}

struct Counted { mass: f32, count: u32, above: u32, below: u32 }

// Workgroup totals of one threshold pass: mass and count at or above mid, and the nearest keys either side.
fn reduce(m: f32, k: vec3u, lid: u32) -> Counted {
  workgroupBarrier(); // earlier readers of rm / rk are done
  rm[lid] = m;
  rk[lid] = k;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) {
      rm[lid] += rm[lid + s];
      let a = rk[lid];
      let b = rk[lid + s];
      rk[lid] = vec3u(a.x + b.x, min(a.y, b.y), max(a.z, b.z));
    }
  }
  let t = workgroupUniformLoad(&rk[0]);
  return Counted(workgroupUniformLoad(&rm[0]), t.x, t.y, t.z);
}

// Kept mass, count and neighbouring keys for the allowed tokens with key(z) >= tau, split at mid.
fn count_above(row: u32, base: u32, zdiv: f32, zmax: f32, tau: u32, mid: u32, lid: u32) -> Counted {
  var m = 0.0;
  var k = vec3u(0u, NONE, 0u);
  for (var j = lid; j < p.v; j += WG) {
    let z = logits[base + j] / zdiv;
    let kz = key(z);
    if (kz >= tau && allowed(row, j)) {
      if (kz >= mid) {
        m += exp(z - zmax);
        k = vec3u(k.x + 1u, min(k.y, kz), k.z);
      } else {
        k.z = max(k.z, kz);
      }
    }
  }
  return reduce(m, k, lid);
}

@compute @workgroup_size(WG)
fn sample_forward(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.b) { return; } // uniform: depends on the workgroup only
  let r = rows[row];
  let greedy = !(r.temperature > 0.0);
  let dv = divisors(r);
  let zdiv = dv.x; // sampling works on z = logit / T
  let ydiv = dv.y; // the reported logprob's divisor
  let base = row * p.v;

  // Pass 1: lse for the logprob over the whole vocabulary (mask ignored); max, argmax, min, count of z
  // over the allowed tokens.
  var a = vec4f(LOWEST, 0.0, LOWEST, -LOWEST);
  var b = vec2u(NONE, 0u);
  for (var j = lid; j < p.v; j += WG) {
    let x = logits[base + j];
    let y = x / ydiv;
    if (y > a.x) { a.y *= exp(a.x - y); a.x = y; }
    a.y += exp(y - a.x);
    if (allowed(row, j)) {
      let z = x / zdiv;
      if (z > a.z) { a.z = z; b.x = j; } // j rises, so the first index wins ties
      a.w = min(a.w, z);
      b.y += 1u;
    }
  }
  ra[lid] = a;
  rb[lid] = b;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) {
      let e = ra[lid];
      let f = rb[lid];
      let c = ra[lid + s];
      let d = rb[lid + s];
      let m = max(e.x, c.x);
      let other = c.z > e.z || (c.z == e.z && d.x < f.x); // the smaller index wins ties
      ra[lid] = vec4f(m, e.y * exp(e.x - m) + c.y * exp(c.x - m), max(e.z, c.z), min(e.w, c.w));
      rb[lid] = vec2u(select(f.x, d.x, other), f.y + d.y);
    }
  }
  let tot = workgroupUniformLoad(&ra[0]);
  let arg = workgroupUniformLoad(&rb[0]);
  let lse = tot.x + log(tot.y);
  let zmax = tot.z;
  let count = arg.y;
  if (count == 0u) { // nothing allowed: no token, logprob -inf (built at run time; a const inf is an error)
    if (lid == 0u) { tokens[row] = NONE; logprobs[row] = bitcast<f32>(0xff800000u | (row & 0u)); }
    return;
  }
  if (greedy) {
    if (lid == 0u) { tokens[row] = arg.x; logprobs[row] = logits[base + arg.x] / ydiv - lse; }
    return;
  }

  // Threshold: keep allowed tokens with key(z) >= tau. Top-k: the largest tau with count(>= tau) >= k;
  // then top-p: the largest tau with mass(>= tau) >= top_p * mass(>= tau_k). Ties at tau are all kept.
  // Bisection over keys, snapped to existing keys each step, so it ends in about log2(distinct) passes.
  var tau = key(tot.w);
  for (var phase = 0u; phase < 2u; phase++) {
    let k_on = phase == 0u && r.top_k > 0u && r.top_k < count;
    let p_on = phase == 1u && r.top_p < 1.0;
    if (!k_on && !p_on) { continue; }
    var want = 0.0;
    if (p_on) { want = r.top_p * count_above(row, base, zdiv, zmax, tau, tau, lid).mass; }
    if (lid == 0u) { lo_hi = vec2u(tau, key(zmax)); }
    loop {
      let iv = workgroupUniformLoad(&lo_hi);
      if (iv.x >= iv.y) { break; }
      let mid = iv.x + ((iv.y - iv.x) >> 1u) + ((iv.y - iv.x) & 1u); // ceil, without overflow
      let c = count_above(row, base, zdiv, zmax, tau, mid, lid);
      let ok = select(c.count >= r.top_k, c.mass >= want, p_on);
      if (lid == 0u) { lo_hi = select(vec2u(iv.x, c.below), vec2u(c.above, iv.y), ok); }
    }
    tau = workgroupUniformLoad(&lo_hi).x;
  }

  let u = f32(pcg3d(vec3u(r.seed, r.step, r.stream)).x >> 8u) * (1.0 / 16777216.0);
  drawSpan(lid, row, base, vec2u(0u, p.v), vec2f(zdiv, ydiv), zmax, tau, lse, u, true);
}

// Split rows (GPUs, rows without top-k or top-p): one workgroup a row walks all V logits in turn (~0.2 ms a row at
// V = 151936 on an H200, as long as a small projection). sample_partial splits each row into `splits` chunks, one
// workgroup each, that write their partial sums; sample_pick combines a row's chunks, draws u as sample_forward does,
// finds the chunk whose mass holds u * total, and walks only that chunk. Same draws up to f32 rounding at a CDF step.
@group(0) @binding(4) var<storage, read_write> partsOut: array<vec4f>; // (B, splits, 2): sample_partial
@group(0) @binding(6) var<storage, read> partsIn: array<vec4f>; // the same buffer: sample_pick

var<workgroup> pick: vec2u; // the chunk that holds the goal, and the goal within it (f32 bits)

// Sampling's divisors of a row: z = logit / zdiv (1 when greedy), the reported logprob's y = logit / ydiv.
fn divisors(r: Row) -> vec2f {
  let zdiv = select(r.temperature, 1.0, !(r.temperature > 0.0));
  return vec2f(zdiv, select(1.0, zdiv, p.lp_at_temperature != 0u));
}

// Elements [x, y) of chunk c of a row.
fn chunk(c: u32) -> vec2u {
  let len = (p.v + p.splits - 1u) / p.splits;
  return vec2u(min(c * len, p.v), min(c * len + len, p.v));
}

// Two partials combined: (ymax, Σ exp(y - ymax), zmax, Σ exp(z - zmax)) and (argmax z, allowed count).
fn combine(e: vec4f, f: vec2u, c: vec4f, d: vec2u) -> array<vec4f, 2> {
  let ym = max(e.x, c.x);
  let zm = max(e.z, c.z);
  let other = c.z > e.z || (c.z == e.z && d.x < f.x); // the smaller index wins ties
  let sums = vec4f(ym, e.y * exp(e.x - ym) + c.y * exp(c.x - ym), zm, e.w * exp(e.z - zm) + c.w * exp(c.z - zm));
  return array<vec4f, 2>(sums, vec4f(bitcast<f32>(select(f.x, d.x, other)), bitcast<f32>(f.y + d.y), 0.0, 0.0));
}

// The workgroup's combined partial (ra, rb hold each thread's).
fn reducePartials(lid: u32) -> array<vec4f, 2> {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) {
      let m = combine(ra[lid], rb[lid], ra[lid + s], rb[lid + s]);
      ra[lid] = m[0];
      rb[lid] = vec2u(bitcast<u32>(m[1].x), bitcast<u32>(m[1].y));
    }
  }
  let t = workgroupUniformLoad(&ra[0]);
  let q = workgroupUniformLoad(&rb[0]);
  return array<vec4f, 2>(t, vec4f(bitcast<f32>(q.x), bitcast<f32>(q.y), 0.0, 0.0));
}

@compute @workgroup_size(WG)
fn sample_partial(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wid.y;
  let c = wid.x;
  if (row >= p.b || c >= p.splits) { return; }
  let dv = divisors(rows[row]);
  let base = row * p.v;
  let span = chunk(c);
  var a = vec4f(LOWEST, 0.0, LOWEST, 0.0);
  var b = vec2u(NONE, 0u);
  for (var j = span.x + lid; j < span.y; j += WG) {
    let x = logits[base + j];
    let y = x / dv.y;
    if (y > a.x) { a.y *= exp(a.x - y); a.x = y; }
    a.y += exp(y - a.x);
    if (allowed(row, j)) {
      let z = x / dv.x;
      if (z > a.z) { a.w *= exp(a.z - z); a.z = z; b.x = j; } // j rises, so the first index wins ties
      a.w += exp(z - a.z);
      b.y += 1u;
    }
  }
  ra[lid] = a;
  rb[lid] = b;
  let t = reducePartials(lid);
  if (lid == 0u) {
    let at = (row * p.splits + c) * 2u;
    partsOut[at] = t[0];
    partsOut[at + 1u] = t[1];
  }
}

@compute @workgroup_size(WG)
fn sample_pick(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.b) { return; } // uniform: depends on the workgroup only
  let r = rows[row];
  let greedy = !(r.temperature > 0.0);
  let dv = divisors(r);
  let base = row * p.v;
  // This thread's chunk (lid < splits), then all of them combined.
  var a = vec4f(LOWEST, 0.0, LOWEST, 0.0);
  var b = vec2u(NONE, 0u);
  if (lid < p.splits) {
    let at = (row * p.splits + lid) * 2u;
    a = partsIn[at];
    b = vec2u(bitcast<u32>(partsIn[at + 1u].x), bitcast<u32>(partsIn[at + 1u].y));
  }
  ra[lid] = a;
  rb[lid] = b;
  let t = reducePartials(lid);
  let lse = t[0].x + log(t[0].y);
  let zmax = t[0].z;
  let arg = bitcast<u32>(t[1].x);
  let count = bitcast<u32>(t[1].y);
  if (count == 0u) { // nothing allowed: no token, logprob -inf
    if (lid == 0u) { tokens[row] = NONE; logprobs[row] = bitcast<f32>(0xff800000u | (row & 0u)); }
    return;
  }
  if (greedy) {
    if (lid == 0u) { tokens[row] = arg; logprobs[row] = logits[base + arg] / dv.y - lse; }
    return;
  }
  let u = f32(pcg3d(vec3u(r.seed, r.step, r.stream)).x >> 8u) * (1.0 / 16777216.0);
  // The chunks' masses at the row's zmax, in order: the chunk whose inclusive sum first passes u * total.
  let cm = select(0.0, a.w * exp(a.z - zmax), lid < p.splits);
  scan(lid, cm);
  if (lid == 0u) { pick = vec2u(NONE, 0u); }
  workgroupBarrier();
  let goal = u * rm[WG - 1u];
  pickBlock(lid, cm, goal);
  let at = workgroupUniformLoad(&pick);
  // Within the chunk, the goal that is left.
  drawSpan(lid, row, base, chunk(at.x), dv, zmax, 0u, lse, bitcast<f32>(at.y), false);
}

// Inclusive scan of each thread's v into rm; last_nonempty: the highest thread with v > 0.
fn scan(lid: u32, v: f32) {
  workgroupBarrier(); // earlier readers of rm are done
  if (lid == 0u) { atomicStore(&last_nonempty, 0u); }
  workgroupBarrier();
  if (v > 0.0) { atomicMax(&last_nonempty, lid); }
  rm[lid] = v;
  for (var off = 1u; off < WG; off <<= 1u) {
    workgroupBarrier();
    let add = select(0.0, rm[lid - min(off, lid)], lid >= off);
    workgroupBarrier();
    rm[lid] += add;
  }
  workgroupBarrier();
}

// The exclusive sum before this thread's block, after scan.
fn exclusive(lid: u32) -> f32 {
  return select(0.0, rm[lid - 1u], lid > 0u);
}

// Whether this thread's block (mass v, after scan) holds the goal: the last non-empty one takes a goal that f32
// rounding put past the total.
fn holdsGoal(lid: u32, v: f32, goal: f32) -> bool {
  return v > 0.0 && goal >= exclusive(lid) && (goal < rm[lid] || lid == atomicLoad(&last_nonempty));
}

// The thread whose block (mass v) holds the goal records its index and the goal within its block in `pick`.
fn pickBlock(lid: u32, v: f32, goal: f32) {
  if (holdsGoal(lid, v, goal)) { pick = vec2u(lid, bitcast<u32>(goal - exclusive(lid))); }
}

// Inverse CDF over elements [span.x, span.y) of a row, in index order, among its kept tokens (allowed, key(z) >= tau):
// each thread owns a contiguous block, a scan of the blocks' masses (at the row's zmax) tells which block holds the
// goal (u times their total with `scaled`, else `goal` as given), and that thread walks its block and writes the
// token and its logprob. dv: the divisors of z and of the reported logprob.
fn drawSpan(lid: u32, row: u32, base: u32, span: vec2u, dv: vec2f, zmax: f32, tau: u32, lse: f32, goal: f32,
            scaled: bool) {
  let len = (span.y - span.x + WG - 1u) / WG;
  let j0 = min(span.x + lid * len, span.y);
  let j1 = min(j0 + len, span.y);
  var bm = 0.0;
  for (var j = j0; j < j1; j++) {
    let z = logits[base + j] / dv.x;
    if (allowed(row, j) && key(z) >= tau) { bm += exp(z - zmax); }
  }
  scan(lid, bm);
  let g = select(goal, goal * rm[WG - 1u], scaled);
  if (holdsGoal(lid, bm, g)) {
    var tok = NONE;
    var acc = exclusive(lid);
    for (var j = j0; j < j1; j++) {
      let z = logits[base + j] / dv.x;
      if (allowed(row, j) && key(z) >= tau) {
        tok = j; // the last kept token if rounding never crosses the goal
        acc += exp(z - zmax);
        if (acc > g) { break; }
      }
    }
    tokens[row] = tok;
    logprobs[row] = logits[base + tok] / dv.y - lse;
  }
}
