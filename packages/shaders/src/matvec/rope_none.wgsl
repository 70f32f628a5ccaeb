// Without RoPE (ROPE_P = 0) the kernels never call ropeOut: this keeps them valid without rope.wgsl's bindings.
fn ropeOut(m: u32, c: u32, v: f32, partner: f32) {}
