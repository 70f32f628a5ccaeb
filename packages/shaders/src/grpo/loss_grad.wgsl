// GRPO per-token loss and its gradient with respect to the new logprobs, in one pass over N tokens:
// PPO-clip or CISPO, token- or sequence-level (GSPO) importance ratios, k3 KL to a reference, and the
// totals (loss, policy, KL, clipped and masked counts) for metrics. grpo_sequence runs first at sequence
// level: one workgroup per sequence computes its ratio and the gradient coefficient of its tokens.
struct Params {
  n: u32,
  nseq: u32, // sequences; a token with seq >= nseq keeps its token-level ratio at sequence level
  cispo: u32, // 0: PPO-clip, 1: CISPO
  sequence: u32, // 0: token-level ratio, 1: sequence-level (GSPO)
  has_ref: u32, // 0: no KL term (ref is not read)
  accumulate: u32, // 1: add to the totals already in the buffer
  eps_low: f32,
  eps_high: f32,
  beta: f32,
}
// weight = loss mask * normalisation (0: not trained); klw = the KL term's weight (beta multiplies it)
struct Meta { adv: f32, weight: f32, seq: u32, klw: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> lp_new: array<f32>; // (N,)
@group(0) @binding(2) var<storage, read> lp_old: array<f32>; // (N,) sampler logprobs; NaN: old = sg(new)
// grpo_forward
@group(0) @binding(3) var<storage, read> lp_ref: array<f32>; // (N,)
@group(0) @binding(4) var<storage, read> tok_meta: array<Meta>; // (N,)
@group(0) @binding(5) var<storage, read> seq_stats: array<vec4f>; // (nseq,)
@group(0) @binding(6) var<storage, read_write> dnew: array<f32>; // (N,) dloss / dlp_new
@group(0) @binding(7) var<storage, read_write> per_token: array<vec4f>; // (N,) weighted loss, kl, clipped, ratio
// loss, policy loss, kl (weighted sums), clipped tokens, masked tokens, clip fraction, sum of ratios, 0
@group(0) @binding(8) var<storage, read_write> totals: array<f32, 8>;
// grpo_sequence
@group(0) @binding(3) var<storage, read> sq_meta: array<Meta>; // (N,)
// Per sequence: ratio, dloss/dlp_new of each of its masked tokens (PPO), masked count, mean log-ratio.
@group(0) @binding(4) var<storage, read_write> sq_stats: array<vec4f>; // (nseq,)

override WG: u32 = 256; // a power of two
const MAX_LOG_RATIO: f32 = 20.0; // log-ratios (and KL's ref - new) are clamped here, so exp stays finite
var<workgroup> ra: array<vec4f, WG>;
var<workgroup> rb: array<vec4f, WG>;

// new - old; a NaN old logprob (checked on the bits) means "none": old = sg(new), as ART does, so the
// value is 0 while the gradient still flows through new.
fn log_ratio(i: u32) -> f32 {
  let old = lp_old[i];
  return select(lp_new[i] - old, 0.0, (bitcast<u32>(old) & 0x7fffffffu) > 0x7f800000u);
}

// Tokens whose PPO gradient the clip zeroes: ratio above 1 + eps_high with A > 0, below 1 - eps_low with A < 0.
fn ppo_clipped(r: f32, adv: f32) -> bool {
  return (adv > 0.0 && r > 1.0 + p.eps_high) || (adv < 0.0 && r < 1.0 - p.eps_low);
}

fn reduce2(a: vec4f, b: vec4f, lid: u32) {
  ra[lid] = a;
  rb[lid] = b;
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) { ra[lid] += ra[lid + s]; rb[lid] += rb[lid + s]; }
  }
  workgroupBarrier();
}

@compute @workgroup_size(WG)
fn grpo_sequence(
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
  @builtin(local_invocation_index) lid: u32,
) {
  let s = wid.x + wid.y * nwg.x;
  if (s >= p.nseq) { return; } // uniform: depends on the workgroup only
  var acc = vec4f(0.0);
  for (var i = lid; i < p.n; i += WG) {
    let m = sq_meta[i];
    if (m.seq == s && m.weight != 0.0) { acc += vec4f(log_ratio(i), 1.0, 0.0, 0.0); }
  }
  reduce2(acc, vec4f(0.0), lid);
  let tot = ra[0];
  let mean = tot.x / max(tot.y, 1.0);
  let lr = clamp(mean, -MAX_LOG_RATIO, MAX_LOG_RATIO);
  let r = exp(lr);
  // d(sum_t w_t policy_t)/dr for PPO; CISPO's ratio is stop-gradient.
  var g = 0.0;
  if (p.cispo == 0u) {
    for (var i = lid; i < p.n; i += WG) {
      let m = sq_meta[i];
      if (m.seq == s && m.weight != 0.0 && !ppo_clipped(r, m.adv)) { g -= m.weight * m.adv; }
    }
  }
  workgroupBarrier(); // everyone has read ra[0]
  reduce2(vec4f(g, 0.0, 0.0, 0.0), vec4f(0.0), lid);
  if (lid == 0u) {
    let inside = select(0.0, 1.0, abs(mean) < MAX_LOG_RATIO); // the clamp's derivative
    sq_stats[s] = vec4f(r, ra[0].x * r * inside / max(tot.y, 1.0), tot.y, mean);
  }
}

// One workgroup strides over all tokens and also reduces the totals.
@compute @workgroup_size(WG)
fn grpo_forward(@builtin(local_invocation_index) lid: u32) {
  var sums = vec4f(0.0); // loss, policy, kl, clipped
  var sums2 = vec4f(0.0); // masked, 0, ratio, 0
  for (var i = lid; i < p.n; i += WG) {
    let m = tok_meta[i];
    let at_seq = p.sequence != 0u && m.seq < p.nseq;
    var lr = log_ratio(i);
    var st = vec4f(1.0, 0.0, 0.0, 0.0);
    if (at_seq) { st = seq_stats[m.seq]; lr = st.w; }
    let lrc = clamp(lr, -MAX_LOG_RATIO, MAX_LOG_RATIO);
    let r = exp(lrc);
    let inside = select(0.0, 1.0, abs(lr) < MAX_LOG_RATIO);
    let rc = clamp(r, 1.0 - p.eps_low, 1.0 + p.eps_high);
    var policy: f32;
    var grad: f32; // d(weighted policy loss)/dlp_new
    var clipped: bool;
    if (p.cispo != 0u) {
      policy = -rc * m.adv * lp_new[i];
      grad = -rc * m.adv * m.weight;
      clipped = r != rc;
    } else {
      clipped = ppo_clipped(r, m.adv);
      policy = -select(r, rc, clipped) * m.adv;
      grad = select(select(-m.adv * r * inside, 0.0, clipped) * m.weight, st.y, at_seq);
    }
    var kl = 0.0;
    if (p.has_ref != 0u) {
      let d = clamp(lp_ref[i] - lp_new[i], -MAX_LOG_RATIO, MAX_LOG_RATIO);
      kl = exp(d) - d - 1.0;
      let d_inside = select(0.0, 1.0, abs(lp_ref[i] - lp_new[i]) < MAX_LOG_RATIO);
      grad += p.beta * m.klw * (1.0 - exp(d)) * d_inside;
    }
    let masked = m.weight != 0.0;
    let w_loss = m.weight * policy + p.beta * m.klw * kl;
    let c = select(0.0, 1.0, clipped && masked);
    dnew[i] = select(0.0, grad, masked);
    per_token[i] = vec4f(w_loss, kl, c, r);
    // The KL total counts the positions the KL term covers (klw != 0: not forced tokens, nor beta-0 ones).
    sums += vec4f(w_loss, m.weight * policy, select(0.0, m.weight * kl, m.klw != 0.0), c);
    sums2 += select(vec4f(0.0), vec4f(1.0, 0.0, r, 0.0), masked);
  }
  reduce2(sums, sums2, lid);
  if (lid == 0u) {
    var t = array<f32, 8>(ra[0].x, ra[0].y, ra[0].z, ra[0].w, rb[0].x, 0.0, rb[0].z, 0.0);
    if (p.accumulate != 0u) {
      for (var k = 0u; k < 8u; k++) { t[k] += totals[k]; }
    }
    t[5] = select(0.0, t[3] / t[4], t[4] > 0.0);
    totals = t;
  }
}
