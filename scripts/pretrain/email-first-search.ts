// What an email model searches first, at temperature 0 on held-out questions: how often its keywords are words of
// the question, how often exactly the naive searcher's word, and the words it uses most (models/README.md).
// Run: node --import tsx scripts/pretrain/email-first-search.ts MODEL_DIR [questions, default 40]
import { Engine } from "webart/engine";
import {
  emailScenario,
  emailSystemPrompt,
  EMAIL_TOOLS,
  firstContentWord,
  searchesQuestion,
  searchKeywords,
} from "webart/envs";

const dir = process.argv[2];
if (!dir) throw new Error("usage: email-first-search.ts MODEL_DIR [questions]");
const n = Number(process.argv[3] ?? 40);
const engine = await Engine.load(dir, { name: "m", kvSlots: 16, maxContext: 2048 });
const client = engine.openaiClient();
const firsts = await Promise.all(
  Array.from({ length: n }, async (_, i) => {
    const s = emailScenario("eval", i);
    const r = await client.chat.completions.create({
      model: "m",
      messages: [
        { role: "system", content: emailSystemPrompt(s) },
        { role: "user", content: s.question.text },
      ],
      tools: EMAIL_TOOLS,
      temperature: 0,
      max_completion_tokens: 60,
    });
    const call = r.choices[0].message.tool_calls?.[0];
    const keywords = call?.type === "function" ? searchKeywords(call.function.arguments) : [];
    return { question: s.question.text.toLowerCase(), keywords, naive: firstContentWord(s.question.text) };
  }),
);
await engine.close();
const fromQuestion = firsts.filter((f) => searchesQuestion(f.keywords, f.question));
const naive = firsts.filter((f) => f.keywords.length === 1 && f.keywords[0] === f.naive);
const counts = new Map<string, number>();
for (const f of firsts)
  counts.set(f.keywords.join(",") || "(none)", (counts.get(f.keywords.join(",") || "(none)") ?? 0) + 1);
const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 8);
console.log(`first searches of ${n} held-out questions at temperature 0:`);
console.log(
  `  keywords all from the question: ${fromQuestion.length}; exactly the naive searcher's word: ${naive.length}`,
);
console.log(`  most used: ${top.map(([k, c]) => `${k} ${c}`).join(", ")}`);
