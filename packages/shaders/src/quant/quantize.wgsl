// q4 quantization on the GPU: what quantizeQ4 (quant/reference.ts) computes, bit for bit, from a tensor's own bytes
// (f32, bf16 or f16, as DTYPE) in a staging buffer. A thread takes two groups of 32 elements (one u32 of scales):
// their largest magnitude, the scale, then each element's nibble.
//
// The same bits as the CPU's, by exact comparisons only (no rounding decides anything):
// - the scale is the least bf16 s >= 2^-14 with 7·s >= max (7·s is exact in f32: 3 bits times 8), found from
//   max / 7 truncated to bf16 and moved up or down while the comparison says so;
// - q + 8 is the largest k in 0..15 with (k - 8.5)·s <= w ((k - 8.5) has at most 5 significant bits, s 8: the
//   product is exact), found from floor(w / s + 8.5) and moved the same way.
// A non-finite element is found from its bits (exponent all ones), before any arithmetic; the first one's element
// index goes to errors[2·slot] (atomicMin), and the first group whose scale passes 4096 to errors[2·slot + 1]. The
// host reads them once the tensors are in and names the tensor.
struct Params {
  n: u32,        // elements in this chunk (from src's element 0)
  out_first: u32, // element index in nibbles of the chunk's first element (a multiple of 64)
  base: u32,     // the tensor's element index of the chunk's first element (for errors)
  slot: u32,     // the tensor's pair of words in errors
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> nibbles: array<u32>;
@group(0) @binding(3) var<storage, read_write> scales: array<u32>;
@group(0) @binding(4) var<storage, read_write> errors: array<atomic<u32>>;

override WG: u32 = 64;
/** 0: f32, 1: bf16, 2: f16. */
override DTYPE: u32 = 1;

const MIN_SCALE_BITS = 0x3880u; // 2^-14 as bf16
const MAX_SCALE = 4096.0;

/** The element's raw bits: an f32's word, or a 16-bit half. */
fn raw(e: u32) -> u32 {
  if (DTYPE == 0u) { return src[e]; }
  return (src[e / 2u] >> (16u * (e % 2u))) & 0xffffu;
}

fn finite(b: u32) -> bool {
  if (DTYPE == 0u) { return (b & 0x7f800000u) != 0x7f800000u; }
  if (DTYPE == 1u) { return (b & 0x7f80u) != 0x7f80u; }
  return (b & 0x7c00u) != 0x7c00u;
}

/** The element's value in f32, exactly (an f16 built from its fields, its subnormals too). */
fn value(b: u32) -> f32 {
  if (DTYPE == 0u) { return bitcast<f32>(b); }
  if (DTYPE == 1u) { return bitcast<f32>(b << 16u); }
  let sign = (b & 0x8000u) << 16u;
  let ex = (b >> 10u) & 31u;
  let man = b & 1023u;
  if (ex == 0u) {
    let m = f32(man) * 5.9604644775390625e-8; // man · 2^-24: exact
    return select(m, -m, sign != 0u);
  }
  return bitcast<f32>(sign | ((ex + 112u) << 23u) | (man << 13u));
}

fn bf(c: u32) -> f32 { return bitcast<f32>(c << 16u); }

@compute @workgroup_size(WG)
fn q4_quantize(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let pair = gid.x + gid.y * nwg.x * WG;
  let e0 = 64u * pair;
  if (e0 >= p.n) { return; }
  var sw = 0u;
  for (var h = 0u; h < 2u; h++) {
    let g0 = e0 + 32u * h;
    if (g0 >= p.n) { break; }
    let g1 = min(p.n, g0 + 32u);
    var mx = 0.0;
    var bad = 0xffffffffu;
    for (var e = g0; e < g1; e++) {
      let b = raw(e);
      if (!finite(b)) { bad = min(bad, e); } else { mx = max(mx, abs(value(b))); }
    }
    if (bad != 0xffffffffu) {
      atomicMin(&errors[2u * p.slot], p.base + bad);
      continue;
    }
    var c = bitcast<u32>(mx / 7.0) >> 16u;
    for (var k = 0; k < 3; k++) { if (7.0 * bf(c) < mx) { c += 1u; } }
    for (var k = 0; k < 3; k++) { if (c > 0u && 7.0 * bf(c - 1u) >= mx) { c -= 1u; } }
    c = max(c, MIN_SCALE_BITS); // (bf16 bits of positive values order as the values)
    let s = bf(c);
    if (s > MAX_SCALE) {
      atomicMin(&errors[2u * p.slot + 1u], p.base + g0);
      continue;
    }
    sw |= c << (16u * h);
    for (var w0 = g0; w0 < g1; w0 += 8u) {
      var word = 0u;
      for (var j = 0u; j < 8u; j++) {
        let e = w0 + j;
        if (e >= g1) { break; }
        let v = value(raw(e));
        var q = clamp(i32(floor(v / s + 8.5)), 0, 15);
        for (var k = 0; k < 2; k++) {
          if (q < 15 && (f32(q + 1) - 8.5) * s <= v) { q += 1; }
          if (q > 0 && (f32(q) - 8.5) * s > v) { q -= 1; }
        }
        word |= u32(q) << (4u * j);
      }
      nibbles[(p.out_first + w0) / 8u] = word;
    }
  }
  scales[(p.out_first + e0) / 64u] = sw;
}
