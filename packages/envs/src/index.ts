// @webart/envs: tic-tac-toe and 2048 as text games, the email-search agent's environment, baselines,
// evaluation, rollouts against the openai SDK, and the pretraining data and tokenizer for the embedded model.
export * from "./types.ts";
export * from "./parse.ts";
export * from "./episode.ts";
export * from "./tictactoe.ts";
export * from "./game2048.ts";
export * from "./players.ts";
export * from "./rollout.ts";
export * from "./evaluate.ts";
export * from "./pretrain/transcripts.ts";
export * from "./pretrain/email-transcripts.ts";
export * from "./pretrain/bpe.ts";
export * from "./pretrain/tokenizer-files.ts";
export * from "./registry.ts";
export * from "./custom.ts";
export * from "./scripted.ts";
export * from "./email/index.ts";
