// Other dtypes than q4 (W_KIND < 3) never call q4Scale: this keeps their pipelines free of q4.wgsl's scales binding.
fn q4Scale(g: u32) -> f32 { return 1.0; }
