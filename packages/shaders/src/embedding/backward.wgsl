// Embedding backward as a deterministic scatter-add without atomics: for each unique id k of this shard
// (CSR built on the CPU), dW[id, c] += sum of dout[n, c] over its tokens n, in token order.
struct Params { C: u32, K: u32, k0: u32, k1: u32, r0: u32, first: u32, colGroups: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> csr: array<u32>; // ids (K) | starts (K + 1) | tokens (N)
@group(0) @binding(2) var<storage, read> dout: array<f32>; // (N, C)
@group(0) @binding(3) var<storage, read_write> dW: array<f32>; // rows [r0, r1) of (V, C), row r0 at `first`

override WG: u32 = 256;

@compute @workgroup_size(WG)
fn embedding_backward(
  @builtin(local_invocation_index) l: u32,
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
) {
  let tile = wid.x + wid.y * nwg.x;
  let k = p.k0 + tile / p.colGroups;
  let c = (tile % p.colGroups) * WG + l;
  if (k >= p.k1 || c >= p.C) { return; }
  let id = csr[k];
  var acc = 0.0;
  for (var j = csr[p.K + k]; j < csr[p.K + k + 1u]; j++) {
    acc += dout[csr[2u * p.K + 1u + j] * p.C + c];
  }
  let e = p.first + (id - p.r0) * p.C + c;
  dW[e] += acc;
}
