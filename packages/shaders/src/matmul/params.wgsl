// What every matmul variant shares, prepended to each by index.ts: C = alpha·op(A)·op(B) (+ bias) (+ C), op =
// identity or transpose per operand, batched with strides (0 broadcasts), B in f32 or packed bf16/f16.
struct Params {
  M: u32, N: u32, K: u32, flags: u32, // flags: 1 transA, 2 transB, 4 bias, 8 accumulate, 16 scaled A (coop)
  lda: u32, ldb: u32, ldc: u32, alpha: f32,
  offA: u32, offB: u32, offC: u32, offBias: u32, // element offsets (B's in 16-bit elements when packed)
  sA: u32, sB: u32, sC: u32, // batch strides in elements; 0 broadcasts
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<u32>; // f32 bits, or two bf16/f16 per word
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> c: array<f32>;

override B_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16

// The two 16-bit halves of a packed word as f32, and element e of B. On SwiftShader per-lane shifts are scalarised,
// so bf16 widens by a multiply.
fn lo(w: u32) -> f32 {
  if (B_KIND == 1u) { return bitcast<f32>(w * 0x10000u); }
  return unpack2x16float(w).x;
}
fn hi(w: u32) -> f32 {
  if (B_KIND == 1u) { return bitcast<f32>(w & 0xffff0000u); }
  return unpack2x16float(w).y;
}
fn loadB(e: u32) -> f32 {
  if (B_KIND == 0u) { return bitcast<f32>(b[e]); }
  let w = b[e >> 1u];
  return select(hi(w), lo(w), (e & 1u) == 0u);
}
