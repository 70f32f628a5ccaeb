// webart/envs: environments and their rollouts (tic-tac-toe, 2048), players and evaluation.
export * from "@webart/envs";
