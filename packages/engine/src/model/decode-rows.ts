// Rows up to which a linear layer is a matvec (W streamed once for all rows) and inference runs model.ts's
// decodeLayer; the memory planner sizes that path's temporaries from it too.
export const DECODE_ROWS = 64;
