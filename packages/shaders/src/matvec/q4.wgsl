// The stream variant's q4 W (W_KIND 3, quant/reference.ts): the groups' bf16 scales, two a u32 (the low half for an
// even group). Bound after the other buffers: binding 8, or with RoPE 12 (index.ts renumbers it after rope.wgsl's).
@group(0) @binding(8) var<storage, read> scales: array<u32>;

// The scale of group g (g = element / 32: with K and the rows' offsets multiples of 32, a vector's index in W).
fn q4Scale(g: u32) -> f32 {
  let wd = scales[g / 2u];
  return bitcast<f32>(select(wd << 16u, wd & 0xffff0000u, (g & 1u) == 1u));
}
