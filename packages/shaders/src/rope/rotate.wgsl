// Rotary position embedding on rows (N, heads, D), HF rotate-half pairing (i, i + D/2), angle pos * invFreq[i].
// rope_backward is the same rotation by the negative angle. The *_inplace entries rotate y itself, since
// WebGPU forbids binding one buffer both read-only and writable in one dispatch.
struct Params { rows: u32, heads: u32, half: u32, posStride: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> pos: array<u32>; // (N, posStride): the position is the last column
@group(0) @binding(2) var<storage, read> invFreq: array<f32>; // (D/2)
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // (N, heads, D)
@group(0) @binding(4) var<storage, read> x: array<f32>; // (N, heads, D), out-of-place entries only

override WG: u32 = 256;
const NONE = 0xffffffffu;

// cos and sin of angle a, accurate to a few f32 ulps on every adapter (WGSL only promises 2^-11 for the built-ins,
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

// For invocation i over (N, heads, D/2): the flat indices of elements i and i + D/2 and the bits of cos and
// sign * sin of pos * invFreq[i], or NONE past the end.
fn pair(gid: vec3u, nwg: vec3u, sign: f32) -> vec4u {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.rows * p.half) { return vec4u(NONE); }
  let k = i % p.half;
  let row = i / p.half; // n * heads + head
  let n = row / p.heads;
  let cs = cosSin(f32(pos[n * p.posStride + p.posStride - 1u]) * invFreq[k]);
  let e = row * 2u * p.half + k;
  return vec4u(e, e + p.half, bitcast<u32>(cs.x), bitcast<u32>(sign * cs.y));
}

// (u, v) -> (u cos - v sin, v cos + u sin), written to y.
fn store(e: vec4u, u: f32, v: f32) {
  let c = bitcast<f32>(e.z);
  let s = bitcast<f32>(e.w);
  y[e.x] = u * c - v * s;
  y[e.y] = v * c + u * s;
}

@compute @workgroup_size(WG)
fn rope_forward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, 1.0);
  if (e.x != NONE) { store(e, x[e.x], x[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_forward_inplace(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, 1.0);
  if (e.x != NONE) { store(e, y[e.x], y[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, -1.0);
  if (e.x != NONE) { store(e, x[e.x], x[e.y]); }
}

@compute @workgroup_size(WG)
fn rope_backward_inplace(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let e = pair(gid, nwg, -1.0);
  if (e.x != NONE) { store(e, y[e.x], y[e.y]); }
}
