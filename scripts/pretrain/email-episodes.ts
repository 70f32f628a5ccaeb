// What an email model does in its own episodes: each held-out question with the model's tool calls, in order, and
// whether it read and answered from the right email (models/README.md, "What the email model writes").
// Run: node --import tsx --import ./scripts/wgsl-loader.mjs --conditions webart-source \
//        scripts/pretrain/email-episodes.ts MODEL_DIR [episodes, default 60] [temperature, default 1] [required|guided]
import { Engine } from "webart/engine";
import { emailScenario, isChoice, rolloutEmail } from "webart/envs";

const dir = process.argv[2];
if (!dir) throw new Error("usage: email-episodes.ts MODEL_DIR [episodes] [temperature] [required|guided]");
const n = Number(process.argv[3] ?? 60);
const temperature = Number(process.argv[4] ?? 1);
const toolChoice = process.argv[5] === "guided" ? "guided" : "required";
const engine = await Engine.load(dir, { name: "m", kvSlots: 16, maxContext: 2048 });
const client = engine.openaiClient();
const episodes = await Promise.all(
  Array.from({ length: n }, async (_, i) => {
    const scenario = emailScenario("eval", 12345 + i);
    const t = await rolloutEmail(client, {
      model: "m",
      scenario,
      temperature,
      maxTokens: 200,
      toolChoice,
      seed: i,
    });
    const calls = t.messagesAndChoices.flatMap((m) =>
      isChoice(m)
        ? [
            (m.message.tool_calls ?? [])
              .map((c) => (c.type === "function" ? c.function.name + c.function.arguments : c.type))
              .join(" ") || "(no call)",
          ]
        : [],
    );
    return { question: scenario.question, calls, metrics: t.metrics };
  }),
);
await engine.close();
for (const { question: q, calls, metrics } of episodes) {
  console.log(`${q.text} | expected ${JSON.stringify(q.answer)} in ${q.messageId}; keywords ${q.keywords.join(", ")}`);
  for (const c of calls) console.log(`    ${c.slice(0, 200)}`);
  console.log(`    right email ${metrics.rightMessage}, correct ${metrics.correct}`);
}
const right = episodes.filter((e) => e.metrics.rightMessage).length;
const correct = episodes.filter((e) => e.metrics.correct).length;
console.log(`${n} episodes at temperature ${temperature}: right email ${right}, correct ${correct}`);
