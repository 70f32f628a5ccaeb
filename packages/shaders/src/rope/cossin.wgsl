// cos and sin of angle a, accurate to a few f32 ulps on every device (WGSL only promises 2^-11 for the built-ins,
// and SwiftShader's are about that coarse): reduce to [-pi, pi] (Cody–Waite; 6.28125 has 8 significant bits, so
// m * 6.28125 is exact for angles below ~5e5), then to [-pi/4, pi/4] by quadrant, then Taylor polynomials.
fn cosSin(a: f32) -> vec2f {
  let m = round(a * 0.15915494);
  let r = (a - m * 6.28125) - m * 1.9353072e-3;
  let k = round(r * 0.63661977);
  let x = (r - k * 1.5707964) + k * 4.3711388e-8;
  let x2 = x * x;
  let s = x + x * x2 * (-1.6666667e-1 + x2 * (8.3333333e-3 + x2 * (-1.9841270e-4 + x2 * 2.7557319e-6)));
  let c = 1.0 + x2 * (-0.5 + x2 * (4.1666667e-2 + x2 * (-1.3888889e-3 + x2 * 2.4801587e-5)));
  switch (u32(i32(k) + 4) % 4u) {
    case 1u: { return vec2f(-s, c); }
    case 2u: { return vec2f(-c, -s); }
    case 3u: { return vec2f(s, -c); }
    default: { return vec2f(c, s); }
  }
}
