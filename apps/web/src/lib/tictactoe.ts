// The tic-tac-toe rules the play board needs, from the environment's own module rather than @webart/envs' index:
// the index also re-exports a scripted openai client, which would pull the whole openai SDK into the page.
export {
  cellName,
  emptyCells,
  lineWinner,
  parseTicTacToeMove,
  renderTicTacToe,
  ticTacToeSystemPrompt,
  type Cell,
  type Mark,
} from "../../../../packages/envs/src/tictactoe.ts";
