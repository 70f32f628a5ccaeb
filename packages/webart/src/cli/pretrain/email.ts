// `webart pretrain --task email`: a model that can start on the email task (issue #26), made from nothing:
//  1. tool-call transcripts of training inboxes played by the naive scripted searcher (the question's first content
//     word searched, the newest result read, its sentence closest to the question answered): legal, unskilled calls,
//     as rolloutEmail records them (envs' emailTranscripts);
//  2. a byte-level BPE of 1024 ids on them as the chat template renders them, tools included (a tokenizer that has
//     seen tool JSON and email text halves an episode's tokens: models/README.md), a 2048-token context;
//  3. full-parameter SFT on the assistant turns (the tool calls as the template writes them) until --target of the
//     model's own calls are well-formed on held-out inboxes, or --minutes.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { emailTranscripts, renderChat, SPECIAL_TOKENS, trainBpe } from "@webart/envs";
import { Sft, type SftOptions } from "./sft.ts";
import { writeModelFiles } from "./start.ts";

/** Context of the email model: the longest measured episode of the scripted searchers takes ~1700 of its tokens. */
const CONTEXT = 2048;

export async function pretrainEmail(
  o: SftOptions & { out: string; minutes: number; target: number },
  episodes: number,
  log: (m: string) => void,
  elapsedMin: () => number,
): Promise<number> {
  const transcripts = await emailTranscripts({ episodes, seed: o.seed });
  const bpe = trainBpe(
    transcripts.map((t) => renderChat(t.messages, { tools: t.tools })),
    { vocabSize: 1024, specialTokens: SPECIAL_TOKENS },
  );
  const vocab = writeModelFiles(o.out, bpe, { seed: o.seed, context: CONTEXT });
  log(`${transcripts.length} email episodes (training inboxes, the naive searcher); tokenizer of ${vocab} ids`);
  // A step here trains ~4x the tokens of a tic-tac-toe step, so the phase runs fewer steps: a shorter warm-up.
  const sft = await Sft.load(o.out, { ...o, warmup: 10 }, log, { name: "webart-tools", maxContext: CONTEXT });
  const phase = await sft.phase("tools", transcripts, o.minutes, o.target, sft.email(o.evalGames));
  const report = {
    task: "email",
    seed: o.seed,
    minutes: Number(elapsedMin().toFixed(1)),
    vocab,
    context: CONTEXT,
    parameters: sft.trainer.tensors.reduce((s, t) => s + t.n, 0),
    episodes,
    phases: [phase],
  };
  writeFileSync(join(o.out, "pretrain.json"), JSON.stringify(report, null, 2) + "\n");
  await sft.close();
  log(`done: ${JSON.stringify(report)}`);
  return 0;
}
