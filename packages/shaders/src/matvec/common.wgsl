// What the decode matvecs (forward.wgsl, subgroup.wgsl, stream.wgsl, columns.wgsl) share, appended to each by
// index.ts: the parameters and bindings, which output column each of a kernel's columns computes and where its row of
// W starts, and the epilogue (bias, LoRA term, gated activation, store). index.ts appends rope.wgsl (RoPE and the KV
// cache write, for q|k|v) or rope_none.wgsl after it.
struct Seg {
  rows: u32, offW: u32, offBias: u32, loraR: u32, // loraR 0: no LoRA term on this segment
  loraB: u32, loraT: u32, scale: f32, base: u32, // base: first output column (0xffffffff: unused segment)
}
struct Params {
  M: u32, N: u32, K: u32, flags: u32, // flags: 1 bias, 2 accumulate
  ldx: u32, ldy: u32, offY: u32, offX: u32,
  ldt: u32, eps: f32, pad0: u32, pad1: u32,
  seg: array<Seg, 3>,
  rope: vec4u, // ROPE_P > 0: (D/2, slots, Tmax, 0) of the KV cache; q's columns end at seg[1].base, k's at seg[2].base
}
@group(0) @binding(0) var<uniform> p: Params;
// Binding 1, x (M, ldx), 2, W, and 4, the (K) RMSNorm weight, are declared by each variant: as f32s and words, or as
// 16-byte vectors in stream.wgsl.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> t: array<f32>; // (M, ldt) LoRA x·Aᵀ of every segment
@group(0) @binding(6) var<storage, read> lora: array<f32>; // the adapter's flat buffer (each segment's B)
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

override ROPE_P: u32 = 0u; // > 0: RoPE in the epilogue (rope.wgsl), pairs ROPE_P columns apart in a kernel's runs

// The output column a kernel's column c computes. With ROPE_P, each run of 2·ROPE_P columns of q and k holds ROPE_P
// columns of a head's first half, then the ROPE_P columns half a head later, so the thread that has both rotates
// the pair; v's columns map to themselves.
fn colOf(c: u32) -> u32 {
  if (ROPE_P == 0u || c >= p.seg[2].base) { return c; }
  let P = max(ROPE_P, 1u); // the same where it matters; keeps pipelines with ROPE_P = 0 free of a division by 0
  let half = p.rope.x;
  let r = c % (2u * P);
  let pair = (c / (2u * P)) * P + r % P;
  return (pair / half) * 2u * half + pair % half + select(0u, half, r >= P);
}

// The segment output column n belongs to.
fn segOf(n: u32) -> u32 {
  return select(0u, 1u, n >= p.seg[1].base) + select(0u, 1u, n >= p.seg[2].base);
}

// Element offset in W of the row of a kernel's column c (GATE: of its gate row, or with up = true its up row).
fn rowOf(c: u32, up: bool) -> u32 {
  if (GATE != 0u) { return p.seg[select(0u, 1u, up)].offW + c * p.K; }
  let n = colOf(c);
  let s = segOf(n);
  return p.seg[s].offW + (n - p.seg[s].base) * p.K;
}

// Row b of segment s for row m of x, from its sum: + bias, + s·t·Bᵀ.
fn finish(m: u32, s: u32, b: u32, sum: f32) -> f32 {
  var v = sum;
  if ((p.flags & 1u) != 0u) { v += bias[p.seg[s].offBias + b]; }
  let R = p.seg[s].loraR;
  if (R > 0u) {
    let tr = m * p.ldt + p.seg[s].loraT;
    let br = p.seg[s].loraB + b * R;
    var d = 0.0;
    for (var r = 0u; r < R; r++) { d += t[tr + r] * lora[br + r]; }
    v += p.seg[s].scale * d;
  }
  return v;
}

fn act(g: f32) -> f32 {
  if (GATE == 2u) {
    // GELU tanh: 0.5·(1 + tanh(a)) = sigmoid(2a), clamped so exp stays finite.
    return g / (1.0 + exp(-clamp(2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g), -80.0, 80.0)));
  }
  return g / (1.0 + exp(-g));
}

fn store(m: u32, n: u32, v: f32) {
  let i = p.offY + m * p.ldy + n;
  if ((p.flags & 2u) != 0u) { y[i] += v; } else { y[i] = v; }
}
