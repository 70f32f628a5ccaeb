// y = add + the normed row: a residual stream plus its normed branch (Gemma's sandwich norms), one pass.
@group(0) @binding(5) var<storage, read> add: array<f32>; // (rows, C)
fn put(i: u32, v: f32) { y[i] = add[i] + v; }
