// The saved runs (IndexedDB): open, resume, export the adapter as a PEFT zip, download the trajectories (JSONL) and
// the chart (SVG), pick runs to compare on one chart, delete (asks twice); import a PEFT zip as a new run; storage.
import { useState } from "react";
import type { RunSummary, StorageInfo } from "../api.ts";
import { bytes, num } from "../lib/format.ts";
import { ENV_LABELS } from "../lib/settings.ts";

export function RunList(props: {
  runs: RunSummary[];
  current: string | null;
  busy: boolean;
  storage: StorageInfo | null;
  onOpen: (r: RunSummary) => void;
  onResume: (r: RunSummary) => void;
  onExport: (r: RunSummary) => void;
  onDownload: (r: RunSummary, what: "trajectories" | "chart") => void;
  compare: string[];
  onCompare: (name: string, on: boolean) => void;
  onDelete: (r: RunSummary) => void;
  onImport: (f: File) => void;
}) {
  const [confirming, setConfirming] = useState<string | null>(null);
  return (
    <section className="panel" aria-labelledby="runs-h">
      <h2 id="runs-h">Runs</h2>
      {props.runs.length === 0 && <p className="muted">No saved runs yet.</p>}
      <ul className="runs" data-testid="run-list">
        {props.runs.map((r) => (
          <li key={r.name} className={r.name === props.current ? "current" : ""} data-testid={`run-${r.name}`}>
            <div className="run-head">
              <button type="button" className="link" onClick={() => props.onOpen(r)} aria-label={`Open ${r.name}`}>
                {r.name}
              </button>
              <span className="muted small">
                {ENV_LABELS[r.env]} · step <span data-testid="run-step">{r.step}</span>/{r.target}
                {r.lastReward !== null && <> · reward {num(r.lastReward)}</>}
                {r.importedFrom && <> · imported</>}
              </span>
            </div>
            <div className="row wrap">
              <button
                type="button"
                disabled={props.busy}
                onClick={() => props.onResume(r)}
                aria-label={`Resume ${r.name}`}
              >
                Resume
              </button>
              <button type="button" onClick={() => props.onExport(r)} aria-label={`Export adapter of ${r.name}`}>
                Export
              </button>
              <button
                type="button"
                onClick={() => props.onDownload(r, "trajectories")}
                aria-label={`Download trajectories of ${r.name}`}
                title="All saved groups as JSONL"
              >
                JSONL
              </button>
              <button
                type="button"
                onClick={() => props.onDownload(r, "chart")}
                aria-label={`Download chart of ${r.name}`}
                title="The reward chart as SVG"
              >
                SVG
              </button>
              <label className="check small">
                <input
                  type="checkbox"
                  checked={props.compare.includes(r.name)}
                  onChange={(e) => props.onCompare(r.name, e.target.checked)}
                  aria-label={`Compare ${r.name}`}
                />
                compare
              </label>
              {confirming === r.name ? (
                <>
                  <button
                    type="button"
                    className="danger"
                    onClick={() => (setConfirming(null), props.onDelete(r))}
                    aria-label={`Confirm deleting ${r.name}`}
                  >
                    Delete for good
                  </button>
                  <button type="button" onClick={() => setConfirming(null)}>
                    Keep
                  </button>
                </>
              ) : (
                <button
                  type="button"
                  disabled={props.busy && r.name === props.current}
                  onClick={() => setConfirming(r.name)}
                  aria-label={`Delete ${r.name}`}
                >
                  Delete
                </button>
              )}
            </div>
          </li>
        ))}
      </ul>
      <label className="file">
        Import a PEFT adapter (.zip)
        <input
          type="file"
          accept=".zip,application/zip"
          aria-label="Import PEFT adapter zip"
          onChange={(e) => {
            const f = e.target.files?.[0];
            if (f) props.onImport(f);
            e.target.value = "";
          }}
        />
      </label>
      {props.storage && props.storage.quota > 0 && (
        <p className="muted small" data-testid="storage">
          Storage: {bytes(props.storage.usage)} used of {bytes(props.storage.quota)} allowed
        </p>
      )}
    </section>
  );
}
