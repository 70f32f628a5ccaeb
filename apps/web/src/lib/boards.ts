// Game boards back from the text the model saw: tic-tac-toe ("A x . o" rows) and 2048 ("2|_|_|4" rows),
// so the rollout viewer can draw each move's position.
import type { EnvName } from "../api.ts";

export type Board = { kind: "tictactoe"; cells: ("x" | "o" | null)[] } | { kind: "2048"; tiles: number[] };

export function parseBoard(env: EnvName, text: string): Board | null {
  if (env === "tictactoe") {
    const rows = text.split("\n").filter((l) => /^[ABC] [xo.] [xo.] [xo.]$/.test(l.trim()));
    if (rows.length !== 3) return null;
    const cells = rows.flatMap((r) => r.trim().split(" ").slice(1)).map((c) => (c === "." ? null : (c as "x" | "o")));
    return { kind: "tictactoe", cells };
  }
  const rows = text.split("\n").filter((l) => /^[\d_]+(\|[\d_]+){3}$/.test(l.trim()));
  if (rows.length !== 4) return null;
  return { kind: "2048", tiles: rows.flatMap((r) => r.trim().split("|")).map((c) => (c === "_" ? 0 : Number(c))) };
}
