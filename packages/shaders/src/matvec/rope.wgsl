// The q|k|v matvec's epilogue with RoPE (ROPE_P > 0): what ropeQkv does after the matvec (models without per-head
// q/k norms), in the same dispatch. Segments 0, 1 and 2 are q (H heads of D), k and v (KV heads each); y is q out
// (M, H·D). Each row's (slot, pos) places its k and v in the caches; a row outside them (padding) writes q only.
// cosSin: rope/cossin.wgsl (appended).
@group(0) @binding(8) var<storage, read> slotPos: array<u32>; // (M, 2)
@group(0) @binding(9) var<storage, read> invFreq: array<f32>; // (D/2)
@group(0) @binding(10) var<storage, read_write> kc: array<f32>; // (S, Tmax, KV, D)
@group(0) @binding(11) var<storage, read_write> vc: array<f32>; // (S, Tmax, KV, D)

// A kernel's column c of row m, from its sum v: a v column into the v cache; a q or k column of a head's first half
// with `partner`, the sum of the column half a head later (ROPE_P columns after c in the kernel's run), both
// finished (bias, LoRA), rotated to the row's position and written to q out or the k cache. The second column of a
// pair writes nothing: its partner's call writes both.
fn ropeOut(m: u32, c: u32, v: f32, partner: f32) {
  let n = colOf(c);
  let s = segOf(n);
  let slot = slotPos[2u * m];
  let pos = slotPos[2u * m + 1u];
  let cached = slot < p.rope.y && pos < p.rope.z;
  let kvEnd = p.seg[2].base;
  let row = (slot * p.rope.z + pos) * (p.N - kvEnd); // the cache row of (slot, pos): KV·D elements
  if (n >= kvEnd) {
    if (cached) { vc[row + n - kvEnd] = finish(m, 2u, n - kvEnd, v); }
    return;
  }
  if (c % (2u * ROPE_P) >= ROPE_P) { return; }
  let half = p.rope.x;
  let b = p.seg[s].base;
  let u = finish(m, s, n - b, v);
  let w = finish(m, s, n + half - b, partner);
  let cs = cosSin(f32(pos) * invFreq[n % (2u * half)]);
  let r0 = u * cs.x - w * cs.y;
  let r1 = w * cs.x + u * cs.y;
  if (s == 0u) {
    let i = p.offY + m * p.ldy + n;
    y[i] = r0;
    y[i + half] = r1;
  } else if (cached) {
    kc[row + n - b] = r0;
    kc[row + n - b + half] = r1;
  }
}
