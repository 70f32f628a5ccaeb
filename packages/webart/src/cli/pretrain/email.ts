// `webart pretrain --task email`: a model that can start on the email task (issue #26), made from nothing:
//  1. tool-call transcripts of training inboxes played by the naive scripted searcher (the question's first content
//     word searched, the newest result read, its sentence closest to the question answered): legal, unskilled calls,
//     as rolloutEmail records them (envs' emailTranscripts);
//  2. a byte-level BPE of 1024 ids on them as the chat template renders them, the tools as one signature line each
//     (a tokenizer that has seen tool JSON and email text, and tools without JSON Schema, take ~700 tokens an
//     episode where webart-tiny's takes ~2400: models/README.md), a 2048-token context;
//  3. full-parameter SFT on the assistant turns (the tool calls as the template writes them) until --target of the
//     model's own calls are well-formed on held-out inboxes, or --minutes.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { emailTranscripts, renderChat, SPECIAL_TOKENS, trainBpe } from "@webart/envs";
import { Sft, type SftOptions, type Transcript } from "./sft.ts";
import { writeModelFiles } from "./start.ts";

/** Context of the email model: the longest measured episode of the scripted searchers takes ~1700 of its tokens. */
const CONTEXT = 2048;

export async function pretrainEmail(
  o: SftOptions & {
    out: string;
    minutes: number;
    firstMinutes: number;
    target: number;
    perfect: number;
    initFrom?: string;
    /** Train the phases in PyTorch (torch.ts). */
    torch: boolean;
    /** Every digit a token (message ids are copied digit by digit). */
    splitDigits: boolean;
  },
  episodes: number,
  log: (m: string) => void,
  elapsedMin: () => number,
): Promise<number> {
  const transcripts = await emailTranscripts({ episodes, seed: o.seed, perfect: o.perfect });
  const bpe = trainBpe(
    transcripts.map((t) => renderChat(t.messages, { tools: t.tools, compactTools: true })),
    { vocabSize: 1024, specialTokens: SPECIAL_TOKENS, splitDigits: o.splitDigits },
  );
  const vocab = writeModelFiles(o.out, bpe, {
    seed: o.seed,
    context: CONTEXT,
    compactTools: true,
    initFrom: o.initFrom,
  });
  log(
    `${transcripts.length} email episodes (training inboxes; the perfect searcher plays ${o.perfect}, the naive one the rest); tokenizer of ${vocab} ids`,
  );
  // A step here trains ~4x the tokens of a tic-tac-toe step, so the phase runs fewer steps: a shorter warm-up.
  const sft = await Sft.load(o.out, { ...o, warmup: 10 }, log, { name: "webart-tools", maxContext: CONTEXT });
  const measure = sft.email(o.evalGames);
  const phases = [];
  // First the first call alone (system prompt, tools, question, the search), ~200-token sequences that train ~4x
  // faster a token than whole episodes: the call format is learned there; then whole episodes, where reading and
  // answering are learned in their long contexts.
  const firstCall = (ts: Transcript[]) => ts.map((t) => ({ ...t, messages: t.messages.slice(0, 3) }));
  // --trainer torch: 200 episodes of other training inboxes held out for the validation loss.
  const held = o.torch
    ? await emailTranscripts({ episodes: 200, seed: o.seed, perfect: o.perfect, start: 1_000_000 })
    : [];
  const phase = (name: string, ts: Transcript[], val: Transcript[], minutes: number) =>
    o.torch ? sft.torchPhase(name, ts, val, minutes, measure) : sft.phase(name, ts, minutes, o.target, measure);
  if (o.firstMinutes > 0)
    phases.push(await phase("first call", firstCall(transcripts), firstCall(held), o.firstMinutes));
  if (o.minutes > 0) phases.push(await phase("episodes", transcripts, held, o.minutes));
  const report = {
    task: "email",
    seed: o.seed,
    minutes: Number(elapsedMin().toFixed(1)),
    vocab,
    context: CONTEXT,
    parameters: sft.trainer.tensors.reduce((s, t) => s + t.n, 0),
    episodes,
    perfect: o.perfect,
    init_from: o.initFrom ?? null,
    trainer: o.torch ? "torch" : "engine",
    split_digits: o.splitDigits,
    phases,
  };
  writeFileSync(join(o.out, "pretrain.json"), JSON.stringify(report, null, 2) + "\n");
  await sft.close();
  log(`done: ${JSON.stringify(report)}`);
  return 0;
}
