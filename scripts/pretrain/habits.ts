// How much win+draw a habit leaves to RL (issue #27; models/README.md, "A base that plays legal moves at random"):
// scripted players that take a win with chance WIN, block a threat with chance BLOCK, and otherwise play the first
// empty cell in reading order with chance ORDERED (else a random empty cell), through the real tic-tac-toe env
// against the random opponent, the agent's side random as in `webart eval`. No model: only the game.
//   node --import tsx --conditions webart-source scripts/pretrain/habits.ts [GAMES]
import { Rng } from "@webart/gpu";
import {
  cellName,
  completingCell,
  emptyCells,
  newTicTacToe,
  other,
  ticTacToeStep,
  type TicTacToeGame,
} from "@webart/envs";

function play(game: TicTacToeGame, win: number, block: number, ordered: number, rng: Rng): void {
  while (game.outcome === null) {
    const w = completingCell(game.board, game.agent);
    const t = completingCell(game.board, other(game.agent));
    const empty = emptyCells(game.board);
    let cell = rng.next() < ordered ? empty[0] : empty[rng.int(empty.length)];
    if (t >= 0 && rng.next() < block) cell = t;
    if (w >= 0 && rng.next() < win) cell = w;
    ticTacToeStep(game, `<move>${cellName(cell)}</move>`);
  }
}

const games = Number(process.argv[2] ?? 20000);
const habits: [win: number, block: number, ordered: number][] = [
  [0, 0, 1],
  [0, 0, 0],
  [0.1, 0.1, 0],
  [0.25, 0.25, 0],
  [0.8, 0.2, 0],
  [0.9, 0.5, 0],
  [0.9, 0.7, 0],
  [1, 1, 1],
  [1, 1, 0],
];
console.log("| takes a win | blocks a threat | otherwise | win+draw |\n| --- | --- | --- | --- |");
for (const [win, block, ordered] of habits) {
  const rng = new Rng(7);
  let ok = 0;
  for (let i = 0; i < games; i++) {
    const game = newTicTacToe({ seed: 1_000_000 + i });
    play(game, win, block, ordered, rng);
    ok += Number(game.outcome === "win" || game.outcome === "draw");
  }
  const otherwise = ordered === 1 ? "first empty cell" : "random empty cell";
  console.log(`| ${win} | ${block} | ${otherwise} | ${(ok / games).toFixed(3)} |`);
}
