
// Passes over a block of BQ query tokens (forward.wgsl, lanes_forward.wgsl; appended to them): the block's tokens
// that share a slot are one pass, its keys the union of their windows. Uses p (n, slots, tmax, window), slotPos and BQ.
var<workgroup> tokSlot: array<u32, BQ>; // NONE for tokens without keys (bad slot or pos)
var<workgroup> tokPos: array<u32, BQ>;
var<workgroup> passMask: u32; // tokens handled in this pass
var<workgroup> passEnd: u32; // their keys are [passStart, passEnd)
var<workgroup> passStart: u32;

// Invocation tid < BQ reads token n0 + tid's slot and position (NONE past N or out of range).
fn loadTokens(n0: u32, tid: u32) {
  if (tid < BQ) {
    var s = NONE;
    var t = 0u;
    if (n0 + tid < p.n) {
      s = slotPos[2u * (n0 + tid)];
      t = slotPos[2u * (n0 + tid) + 1u];
      if (s >= p.slots || t >= p.tmax) { s = NONE; }
    }
    tokSlot[tid] = s;
    tokPos[tid] = t;
  }
}

// The block's tokens past N, as a bit mask.
fn pastN(n0: u32) -> u32 {
  var m = 0u;
  for (var i = 0u; i < BQ; i++) {
    if (n0 + i >= p.n) { m |= 1u << i; }
  }
  return m;
}

// Invocation 0: the next pass's tokens (those not `done` that share the first one's slot) and their key range.
fn planPass(done: u32, tid: u32) {
  if (tid == 0u) {
    var mask = 0u;
    var end = 0u;
    var start = NONE;
    var slot = NONE;
    for (var i = 0u; i < BQ; i++) {
      if ((done & (1u << i)) != 0u) { continue; }
      if (mask == 0u) { slot = tokSlot[i]; }
      if (tokSlot[i] == slot) {
        mask |= 1u << i;
        if (slot != NONE) {
          end = max(end, tokPos[i] + 1u);
          start = min(start, select(0u, tokPos[i] + 1u - p.window, tokPos[i] + 1u > p.window));
        }
      }
    }
    passMask = mask;
    passEnd = end;
    passStart = select(start, 0u, start == NONE);
  }
}
