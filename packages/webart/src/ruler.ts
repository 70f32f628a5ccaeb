// webart/ruler: RULER, relative LLM-as-judge scoring of a trajectory group.
export * from "@webart/ruler";
