// Game boards: tic-tac-toe (cells are buttons when a person can move) and 2048 tiles.
const ROWS = "ABC";

export function TicTacToeBoard(props: {
  cells: ("x" | "o" | null)[];
  onPick?: (cell: number) => void;
  disabled?: boolean;
  highlight?: number | null;
  label: string;
}) {
  return (
    <div className="ttt" role="grid" aria-label={props.label}>
      {[0, 1, 2].map((r) => (
        <div role="row" key={r} className="ttt-row">
          {[0, 1, 2].map((c) => {
            const i = r * 3 + c;
            const v = props.cells[i];
            const name = `${ROWS[r]}${c + 1}`;
            const cls = `ttt-cell${v ? ` mark-${v}` : ""}${props.highlight === i ? " last" : ""}`;
            return props.onPick ? (
              <button
                key={c}
                role="gridcell"
                className={cls}
                aria-label={`${name}${v ? ` ${v}` : " empty"}`}
                disabled={props.disabled || v !== null}
                onClick={() => props.onPick!(i)}
              >
                {v ?? ""}
              </button>
            ) : (
              <div key={c} role="gridcell" className={cls} aria-label={`${name}${v ? ` ${v}` : " empty"}`}>
                {v ?? ""}
              </div>
            );
          })}
        </div>
      ))}
    </div>
  );
}

export function Board2048(props: { tiles: number[]; label: string }) {
  return (
    <div className="b2048" role="grid" aria-label={props.label}>
      {props.tiles.map((v, i) => (
        <div key={i} role="gridcell" className={`tile t${Math.min(v, 4096)}`}>
          {v || ""}
        </div>
      ))}
    </div>
  );
}
