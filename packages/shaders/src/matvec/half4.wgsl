// What the variants that read W as 16-byte vectors (stream.wgsl, columns.wgsl) share; index.ts appends it to them.
// Elements 0-3 (hi = false) or 4-7 of a 16-byte vector of 16-bit W (W_KIND 1 bf16, 2 f16) as f32.
fn half4(v: vec4u, hi: bool) -> vec4f {
  let a = select(v.xy, v.zw, hi);
  if (W_KIND == 1u) {
    return vec4f(bitcast<f32>(a.x << 16u), bitcast<f32>(a.x & 0xffff0000u), bitcast<f32>(a.y << 16u),
                 bitcast<f32>(a.y & 0xffff0000u));
  }
  return vec4f(unpack2x16float(a.x), unpack2x16float(a.y));
}
