// y = the normed row (rmsnorm forward without a residual).
fn put(i: u32, v: f32) { y[i] = v; }
