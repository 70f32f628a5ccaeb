// (d) The Web Worker: webart's engine on the browser's WebGPU, the embedded model, one chat completion.
import { Engine, EMBEDDED_MODEL } from "webart/engine";

try {
  const engine = await Engine.load(EMBEDDED_MODEL, { kvSlots: 2, maxContext: 256 });
  const completion = await engine.openaiClient().chat.completions.create({
    model: EMBEDDED_MODEL,
    messages: [{ role: "user", content: "Your move." }],
    max_tokens: 8,
    temperature: 0,
  });
  const choice = completion.choices[0];
  postMessage({
    model: completion.model,
    content: choice.message.content,
    finish: choice.finish_reason,
    tokens: completion.usage?.completion_tokens,
  });
} catch (e) {
  postMessage({ error: String(e?.stack ?? e) });
}
