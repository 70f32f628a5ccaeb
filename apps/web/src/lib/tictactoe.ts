// The tic-tac-toe rules the play board needs, from the environments' package (the page bundle keeps only these:
// the build tree-shakes the rest of webart/envs).
export {
  cellName,
  emptyCells,
  lineWinner,
  parseTicTacToeMove,
  renderTicTacToe,
  ticTacToeSystemPrompt,
  type Cell,
  type Mark,
} from "webart/envs";
