// Rows up to which a linear layer may be a matvec (W streamed once for all rows) and inference may run model.ts's
// decodeLayer: start-up tuning picks the device's own bound at or below it (KernelTuning.decodeRows, Model.decodeRows),
// and the memory planner sizes that path's temporaries from it (PlanSetup.decodeRows).
import { DECODE_ROWS_MAX } from "@webart/shaders";

export const DECODE_ROWS = DECODE_ROWS_MAX;
