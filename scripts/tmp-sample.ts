import { Engine } from "@webart/engine";
import { emailScenario, emailSystemPrompt, EMAIL_TOOLS } from "@webart/envs";
const e = await Engine.load(process.argv[2], { name: "m", kvSlots: 4, maxContext: 2048 });
const c = e.openaiClient();
for (let i = 0; i < 3; i++) {
  const s = emailScenario("eval", i);
  const r = await c.chat.completions.create({ model: "m", messages: [{ role: "system", content: emailSystemPrompt(s) }, { role: "user", content: s.question.text }], tools: EMAIL_TOOLS, temperature: Number(process.argv[3] ?? 1), max_completion_tokens: 80 });
  console.log(JSON.stringify(r.choices[0].message), r.choices[0].finish_reason);
}
await e.close();
