// The email-search environment (ART•E-style): synthetic inboxes, the agent's tools, the rollout, scoring and
// two scripted baselines.
export * from "./inbox.ts";
export * from "./search.ts";
export * from "./tools.ts";
export * from "./grade.ts";
export * from "./rollout.ts";
export * from "./baselines.ts";
