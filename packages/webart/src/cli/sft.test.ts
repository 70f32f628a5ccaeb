// `webart sft` on the embedded model: tic-tac-toe transcripts (a move that wins) in each line format, two epochs
// as two steps whose loss falls, then `webart train --resume` goes on with GRPO from them; bad lines are named.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { cellName, completingCell, renderTicTacToe, ticTacToeSystemPrompt, type Cell } from "@webart/envs";
import { readConversations, sftCommand } from "./sft.ts";
import { trainCommand } from "./train/train.ts";

const runs = mkdtempSync(join(tmpdir(), "webart-sft-cli-"));

/** Boards where x (to move) has two in a line and the third cell empty: the winning move is the reply. */
function transcripts(): { messages: { role: string; content: string }[] }[] {
  const out: { messages: { role: string; content: string }[] }[] = [];
  const lines = [
    [0, 1, 2],
    [3, 4, 5],
    [6, 7, 8],
    [0, 3, 6],
    [1, 4, 7],
    [2, 5, 8],
    [0, 4, 8],
    [2, 4, 6],
  ];
  for (const [k, line] of lines.entries()) {
    const board: Cell[] = new Array<Cell>(9).fill(null);
    board[line[0]] = "x";
    board[line[1]] = "x";
    const o = [0, 1, 2, 3, 4, 5, 6, 7, 8].filter((c) => !line.includes(c));
    board[o[k % o.length]] = "o";
    board[o[(k + 2) % o.length]] = "o";
    const win = completingCell(board, "x");
    out.push({
      messages: [
        { role: "system", content: ticTacToeSystemPrompt("x") },
        { role: "user", content: renderTicTacToe(board) },
        { role: "assistant", content: `<move>${cellName(win)}</move>` },
      ],
    });
  }
  return out;
}

describe("webart sft", () => {
  it("reads each line format, trains an epoch a step with the loss falling, and webart train --resume goes on", async () => {
    const data = join(runs, "wins.jsonl");
    const convs = transcripts();
    // OpenAI's format, an ART trajectory and a trajectory group (two conversations), and a blank line.
    const art = (c: (typeof convs)[number]) => ({ messages_and_choices: c.messages, reward: 1 });
    const text = [
      ...convs.slice(0, 5).map((c) => JSON.stringify(c)),
      "",
      JSON.stringify(art(convs[5])),
      JSON.stringify({ trajectories: [art(convs[6]), art(convs[7])], exceptions: [] }),
    ].join("\n");
    writeFileSync(data, text + "\n");
    const read = readConversations(data);
    expect(read.trajectories.length).toBe(8);
    expect(read.lines).toEqual([1, 2, 3, 4, 5, 7, 8, 8]);
    expect(read.trajectories.map((t) => t.messages())).toEqual(convs.map((c) => c.messages));

    const log = vi.spyOn(console, "log").mockImplementation(() => {});
    try {
      const args = ["--data", data, "--name", "warm", "--runs", runs, "--lr", "5e-3", "--batch-size", "4"];
      expect(await sftCommand([...args, "--epochs", "2"])).toBe(0);
      const said = log.mock.calls.map((c) => String(c[0]));
      const losses = said.flatMap((l) => {
        const m = /^epoch \d\/2: step (\d), loss ([\d.]+) \(first batch ([\d.]+)/.exec(l);
        return m ? [{ step: Number(m[1]), loss: Number(m[2]), first: Number(m[3]) }] : [];
      });
      expect(losses.map((l) => l.step)).toEqual([1, 2]);
      expect(losses[1].loss).toBeLessThan(losses[0].loss);
      expect(said.at(-1)).toMatch(/go on with GRPO: webart train --env tictactoe --name warm --runs .* --resume$/);
      // The run refuses a second start without --resume, and GRPO continues from the warm start.
      await expect(sftCommand(args)).rejects.toThrow(/already has 2 steps .* pass --resume/);
      const tiny = ["--group-size", "2", "--groups-per-step", "2", "--max-tokens", "10", "--runs", runs];
      expect(await trainCommand(["--steps", "3", "--name", "warm", "--resume", ...tiny])).toBe(0);
    } finally {
      log.mockRestore();
    }
    const dir = join(runs, "tictactoe/models/warm");
    expect(readFileSync(join(dir, "latest"), "utf8").trim()).toBe("3");
    const rows = readFileSync(join(dir, "history.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rows.map((r) => [r.step, typeof r["train/sft_loss"], typeof r["train/reward"]])).toEqual([
      [1, "number", "undefined"],
      [2, "number", "undefined"],
      [3, "undefined", "number"],
    ]);
  }, 300_000);

  it("names the file and line of what it cannot use", async () => {
    const bad = join(runs, "bad.jsonl");
    const good = JSON.stringify(transcripts()[0]);
    writeFileSync(bad, `${good}\n{"prompt": "hi", "completion": "there"}\n`);
    expect(() => readConversations(bad)).toThrow(/bad\.jsonl:2: expected \{"messages": \[\.\.\.\]\}/);
    writeFileSync(bad, `${good}\n{"messages": [{"content": "hi"}]}\n`);
    expect(() => readConversations(bad)).toThrow(/bad\.jsonl:2: messages\[0\] has no "role"/);
    writeFileSync(bad, `${good}\nnot json\n`);
    expect(() => readConversations(bad)).toThrow(/bad\.jsonl:2: not JSON/);
    writeFileSync(bad, "\n\n");
    expect(() => readConversations(bad)).toThrow(/no conversations in it/);
    // A conversation with nothing to learn is named by its line, and no step is taken.
    const noReply = { messages: transcripts()[1].messages.slice(0, 2) };
    writeFileSync(bad, `${good}\n${good}\n${JSON.stringify(noReply)}\n`);
    await expect(sftCommand(["--data", bad, "--name", "bad", "--runs", runs, "--seed", "3"])).rejects.toThrow(
      /has no assistant turn to learn from .*\(.*bad\.jsonl:3\)/,
    );
    expect(readFileSync(join(runs, "tictactoe/models/bad/latest"), "utf8").trim()).toBe("0");
    await expect(sftCommand(["--name", "x", "--runs", runs])).rejects.toThrow(/--data FILE is required/);
  });
});
