// Decode matvec, stream variant (same contract, fused options and epilogue as forward.wgsl), built for a GPU's
// memory bandwidth, which a matvec reaches only with enough bytes in flight (Little's law: on the H200, ~4 TB/s
// times ~1 us of latency is ~4 MB). Every load of W is 16 bytes (8 bf16/f16 or 4 f32 elements, or a q4 group of 32
// elements whose scale is loaded alongside), and each thread issues four of them, from branch-free clamped addresses,
// before it uses any. T threads read one output column's row (and under GATE its up row) along K, and a workgroup of
// G such groups owns G columns (T · G = 256): index.ts picks T from K so that a row's vectors are about four a
// thread, so a projection of few outputs and a long K (the MLP's down projection) still keeps ~200k threads loading.
// Needs every row of W to start on 16 bytes (K and the segments' offsets multiples of 8 halves or 4 floats, or of 32
// q4 elements: a vector is then one group): index.ts runs the workgroup variant otherwise (q4: it throws, having no
// other variant). Parameters, bindings and the epilogue: common.wgsl; half4: half4.wgsl; q4Scale: q4.wgsl, or
// q4_none.wgsl for the other dtypes (all appended).
@group(0) @binding(1) var<storage, read> x: array<vec4f>; // rows start on 16 bytes (offX, ldx multiples of 4)
@group(0) @binding(2) var<storage, read> w: array<vec4u>; // 4 f32, 8 bf16/f16, or 32 q4 nibbles (a group) a vector
@group(0) @binding(4) var<storage, read> nw: array<vec4f>; // (K) RMSNorm weight
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16, 3 q4
override T: u32 = 32u; // threads a column (a power of two)
override G: u32 = 8u; // columns a workgroup
override MT: u32 = 4u; // rows of x per pass, 1..4
override NORM: bool = false;
override GATE: u32 = 0u; // 0 none, 1 silu, 2 GELU tanh: y = act(seg 0) * seg 1

var<workgroup> red: array<vec2f, 4u * T * G>; // (MT, G·T): partial sums of the column's row (x) and up row (y)
var<workgroup> redSq: array<f32, 4u * T * G>; // NORM: partial Σ x² of each row of x

// A thread's sums for the pass's rows of x: · the column's row, · the up row (GATE), Σ x² (NORM); and the rows'
// element offsets in x.
var<private> acc: array<vec4f, 4>;
var<private> accUp: array<vec4f, 4>;
var<private> sq: vec4f;
var<private> xr: vec4u;

// Elements e..e + 3 of x (e a multiple of 4) in one 16-byte load: with four scalar loads instead, the H200 ran
// Qwen2.5-0.5B's LM head (151936 x 896, bf16) in 164 us instead of 98.
fn x4(e: u32) -> vec4f {
  return x[e / 4u];
}

// Elements a vector of W.
fn vecElems() -> u32 {
  return select(select(8u, 32u, W_KIND == 3u), 4u, W_KIND == 0u);
}

// Adds the vector of the column's row (v0) and of its up row (v1) that start at element k of K; `on` is 0 for a
// vector past the row's end (k was clamped to the row's last vector, so every read stays in bounds).
fn accumulate(v0: vec4u, v1: vec4u, k: u32, on: f32) {
  let E = vecElems();
  for (var h = 0u; h < E / 4u; h++) {
    let kk = k + 4u * h;
    let hi = h == 1u;
    var w0 = on * select(half4(v0, hi), bitcast<vec4f>(v0), W_KIND == 0u);
    var w1 = vec4f();
    if (GATE != 0u) { w1 = on * select(half4(v1, hi), bitcast<vec4f>(v1), W_KIND == 0u); }
    if (NORM) {
      let nv = nw[kk / 4u];
      w0 *= nv;
      w1 *= nv;
    }
    for (var i = 0u; i < MT; i++) {
      let xv = x4(xr[i] + kk);
      acc[i] += xv * w0;
      if (GATE != 0u) { accUp[i] += xv * w1; }
      if (NORM) { sq[i] += on * dot(xv, xv); }
    }
  }
}

// Elements 4h..4h + 3 of a q4 vector (nibbles 4(h % 2).. of its word h / 2) as q = nibble - 8: the nibble holds
// q + 8, so with its top bit flipped it is q in 4-bit two's complement, sign-extended by the arithmetic shift.
fn q4x4(v: vec4u, h: u32) -> vec4f {
  let wd = (v[h / 2u] >> (16u * (h % 2u))) ^ 0x8888u;
  return vec4f(bitcast<vec4i>(vec4u(wd) << vec4u(28u, 24u, 20u, 16u)) >> vec4u(28u));
}

// accumulate for q4: v0 and v1 are each one group of 32 elements from element k, with scales s.x and s.y. Each
// weight is q·s in f32, exactly the value of the f16 copy (model.ts dense), added as accumulate adds 16-bit ones: per
// group sums in private arrays ran several times slower on SwiftShader.
fn accumulateQ4(v0: vec4u, v1: vec4u, s: vec2f, k: u32, on: f32) {
  let c = on * s;
  for (var h = 0u; h < 8u; h++) {
    let kk = k + 4u * h;
    var w0 = q4x4(v0, h) * c.x;
    var w1 = vec4f();
    if (GATE != 0u) { w1 = q4x4(v1, h) * c.y; }
    if (NORM) {
      let nv = nw[kk / 4u];
      w0 *= nv;
      w1 *= nv;
    }
    for (var i = 0u; i < MT; i++) {
      let xv = x4(xr[i] + kk);
      acc[i] += xv * w0;
      if (GATE != 0u) { accUp[i] += xv * w1; }
      if (NORM) { sq[i] += on * dot(xv, xv); }
    }
  }
}

@compute @workgroup_size(T * G)
fn matvec_forward_stream(@builtin(local_invocation_id) lid: vec3u, @builtin(workgroup_id) wid: vec3u,
                         @builtin(num_workgroups) nwg: vec3u) {
  let first = (wid.x + wid.y * nwg.x) * G;
  if (first >= p.N) { return; } // whole workgroup: grid padding
  let tid = lid.x;
  let g = tid / T;
  let t = tid % T;
  let n = first + g;
  let nc = min(n, p.N - 1u); // columns past N load a valid row; their sums are dropped
  let E = vecElems();
  let r0 = rowOf(nc, false) / E; // vector index of the row's start (q4: also its first group's)
  let r1 = select(r0, rowOf(nc, true) / E, GATE != 0u);
  let TG = T * G;
  let S = T * E; // elements from one of a thread's vectors to its next
  let kLast = p.K - E; // the row's last vector (K is a multiple of E)
  for (var m0 = wid.z * MT; m0 < p.M; m0 += MT * nwg.z) { // row blocks: z of the grid (index.ts rowBlocks)
    xr = p.offX + vec4u(m0, min(m0 + 1u, p.M - 1u), min(m0 + 2u, p.M - 1u), min(m0 + 3u, p.M - 1u)) * p.ldx;
    acc = array<vec4f, 4>(vec4f(), vec4f(), vec4f(), vec4f());
    accUp = array<vec4f, 4>(vec4f(), vec4f(), vec4f(), vec4f());
    sq = vec4f();
    for (var k = t * E; k < p.K; k += 4u * S) {
      let k1 = min(k + S, kLast);
      let k2 = min(k + 2u * S, kLast);
      let k3 = min(k + 3u * S, kLast);
      // All loads first: four (or eight, gated) 16-byte reads in flight before the first multiply.
      let a0 = w[r0 + k / E];
      let a1 = w[r0 + k1 / E];
      let a2 = w[r0 + k2 / E];
      let a3 = w[r0 + k3 / E];
      var b0 = vec4u();
      var b1 = vec4u();
      var b2 = vec4u();
      var b3 = vec4u();
      if (GATE != 0u) {
        b0 = w[r1 + k / E];
        b1 = w[r1 + k1 / E];
        b2 = w[r1 + k2 / E];
        b3 = w[r1 + k3 / E];
      }
      let on1 = select(0.0, 1.0, k + S < p.K);
      let on2 = select(0.0, 1.0, k + 2u * S < p.K);
      let on3 = select(0.0, 1.0, k + 3u * S < p.K);
      if (W_KIND == 3u) {
        // The groups' scales, loaded before the first multiply too (the gate row's in .x, the up row's in .y).
        var s0 = vec2f(q4Scale(r0 + k / E), 0.0);
        var s1 = vec2f(q4Scale(r0 + k1 / E), 0.0);
        var s2 = vec2f(q4Scale(r0 + k2 / E), 0.0);
        var s3 = vec2f(q4Scale(r0 + k3 / E), 0.0);
        if (GATE != 0u) {
          s0.y = q4Scale(r1 + k / E);
          s1.y = q4Scale(r1 + k1 / E);
          s2.y = q4Scale(r1 + k2 / E);
          s3.y = q4Scale(r1 + k3 / E);
        }
        accumulateQ4(a0, b0, s0, k, 1.0);
        accumulateQ4(a1, b1, s1, k1, on1);
        accumulateQ4(a2, b2, s2, k2, on2);
        accumulateQ4(a3, b3, s3, k3, on3);
      } else {
        accumulate(a0, b0, k, 1.0);
        accumulate(a1, b1, k1, on1);
        accumulate(a2, b2, k2, on2);
        accumulate(a3, b3, k3, on3);
      }
    }
    for (var i = 0u; i < MT; i++) {
      red[i * TG + tid] = vec2f(dot(acc[i], vec4f(1.0)), dot(accUp[i], vec4f(1.0)));
      if (NORM) { redSq[i * TG + tid] = sq[i]; }
    }
    workgroupBarrier();
    for (var s = T / 2u; s > 0u; s >>= 1u) {
      if (t < s) {
        for (var i = 0u; i < MT; i++) {
          red[i * TG + tid] += red[i * TG + tid + s];
          if (NORM) { redSq[i * TG + tid] += redSq[i * TG + tid + s]; }
        }
      }
      workgroupBarrier();
    }
    let m = m0 + t;
    if (t < MT && m < p.M && n < p.N) {
      var rs = 1.0;
      if (NORM) { rs = inverseSqrt(redSq[t * TG + g * T] / f32(p.K) + p.eps); }
      let v = rs * red[t * TG + g * T];
      if (GATE != 0u) {
        store(m, n, act(finish(m, 0u, n, v.x)) * finish(m, 1u, n, v.y));
      } else if (ROPE_P > 0u) { // G = 2 ROPE_P: columns g and g + ROPE_P are a pair
        ropeOut(m, n, v.x, rs * red[t * TG + ((g + ROPE_P) % G) * T].x);
      } else {
        let s = segOf(n);
        store(m, n, finish(m, s, n - p.seg[s].base, v.x));
      }
    }
    workgroupBarrier(); // red is reused by the next pass
  }
}
