// Reading the agent's answer: the text inside the first <move>...</move> pair, whatever surrounds it.

/** The trimmed content of the first `<move>…</move>` (tags in any case), or null when there is none. */
export function moveText(reply: string): string | null {
  const m = /<move>([\s\S]*?)<\/move>/i.exec(reply);
  return m ? m[1].trim() : null;
}
