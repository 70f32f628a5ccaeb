// A LoRA adapter merged into its linear layer's weight: W' = W + s·B·A in f32, W (f32, or bf16/f16 packed two to a u32,
// the even element in the low half) and W' (out, in) at the same element offset of their buffers, B (out, R) and
// A (R, in) in the adapter's flat buffer. R = 0 converts W alone. One thread an element of W'.
struct Params { rows: u32, cols: u32, R: u32, offW: u32, offA: u32, offB: u32, scale: f32, pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> lora: array<f32>;
@group(0) @binding(3) var<storage, read_write> merged: array<f32>;

override WG: u32 = 256;
override W_KIND: u32 = 0u; // 0 f32, 1 bf16, 2 f16

fn weight(i: u32) -> f32 {
  if (W_KIND == 0u) { return bitcast<f32>(w[i]); }
  let word = w[i >> 1u];
  let h = select(word & 0xffffu, word >> 16u, (i & 1u) == 1u);
  if (W_KIND == 1u) { return bitcast<f32>(h << 16u); }
  return unpack2x16float(h).x;
}

@compute @workgroup_size(WG)
fn lora_merge(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * WG;
  if (i >= p.rows * p.cols) { return; }
  let o = i / p.cols;
  let c = i % p.cols;
  var d = 0.0;
  for (var r = 0u; r < p.R; r++) { d += lora[p.offB + o * p.R + r] * lora[p.offA + r * p.cols + c]; }
  merged[p.offW + i] = weight(p.offW + i) + p.scale * d;
}
