// Choosing the base model: the embedded one, a URL, a Hugging Face repo, or a folder / files on this computer;
// its memory plan before anything is loaded (refused with the reason when it does not fit), and load progress.
import { useState } from "react";
import type { ModelChoice, ModelInfo } from "../api.ts";
import { bytes, num } from "../lib/format.ts";

export interface LoadProgress {
  stage: "download" | "weights" | "copy";
  file: string;
  bytesDone: number;
  bytesTotal: number;
}

const STAGE = { download: "Downloading", weights: "Loading weights", copy: "Copying into the model cache" };

export function ModelPanel(props: {
  choice: ModelChoice;
  info: ModelInfo | null;
  error: string | null;
  checking: boolean;
  progress: LoadProgress | null;
  disabled: boolean;
  onChoose: (m: ModelChoice) => void;
  onPickLocal: (files: File[] | FileSystemDirectoryHandle, label: string) => void;
}) {
  const [url, setUrl] = useState(props.choice.kind === "url" ? props.choice.url : "");
  const [repo, setRepo] = useState(props.choice.kind === "hub" ? props.choice.repo : "");
  const kind = props.choice.kind;
  const embeddedName = props.choice.kind === "embedded" ? props.choice.name : undefined;
  const online = typeof navigator === "undefined" || navigator.onLine;
  const hasPicker = typeof window !== "undefined" && "showDirectoryPicker" in window;
  const pickFolder = async () => {
    try {
      const h = await (
        window as unknown as { showDirectoryPicker(): Promise<FileSystemDirectoryHandle> }
      ).showDirectoryPicker();
      props.onPickLocal(h, h.name);
    } catch (e) {
      if ((e as Error).name !== "AbortError") throw e;
    }
  };
  const onFiles = (list: FileList | null) => {
    const files = list ? Array.from(list) : [];
    if (!files.length) return;
    const label = files[0].webkitRelativePath
      ? files[0].webkitRelativePath.split("/")[0]
      : files.length === 1
        ? files[0].name
        : `${files.length} files`;
    props.onPickLocal(files, label);
  };
  const p = props.progress;
  return (
    <section className="panel" aria-labelledby="model-h">
      <h2 id="model-h">Model</h2>
      <fieldset disabled={props.disabled}>
        <legend>Base model</legend>
        <label className="choice">
          <input
            type="radio"
            name="model"
            checked={kind === "embedded" && !embeddedName}
            onChange={() => props.onChoose({ kind: "embedded" })}
          />
          webart-tiny, embedded (ships with the app)
        </label>
        <label className="choice">
          <input
            type="radio"
            name="model"
            checked={kind === "embedded" && embeddedName === "webart-tools"}
            onChange={() => props.onChoose({ kind: "embedded", name: "webart-tools" })}
          />
          webart-tools, embedded (the email agent's: tool calls, a 2048-token context)
        </label>
        <label className="choice">
          <input
            type="radio"
            name="model"
            checked={kind === "url"}
            onChange={() => url && props.onChoose({ kind: "url", url })}
          />
          From a URL (a Hugging Face-layout folder)
        </label>
        <div className="row">
          <input
            aria-label="Model URL"
            type="url"
            placeholder="https://example.org/models/my-model/"
            value={url}
            onChange={(e) => setUrl(e.target.value)}
          />
          <button type="button" disabled={!url.trim()} onClick={() => props.onChoose({ kind: "url", url: url.trim() })}>
            Use URL
          </button>
        </div>
        <label className="choice">
          <input
            type="radio"
            name="model"
            checked={kind === "hub"}
            disabled={!online}
            onChange={() => repo && props.onChoose({ kind: "hub", repo })}
          />
          Hugging Face repo {online ? "" : "(offline)"}
        </label>
        <div className="row">
          <input
            aria-label="Hugging Face repo id"
            placeholder="org/name"
            value={repo}
            disabled={!online}
            onChange={(e) => setRepo(e.target.value)}
          />
          <button
            type="button"
            disabled={!online || !repo.trim()}
            onClick={() => props.onChoose({ kind: "hub", repo: repo.trim() })}
          >
            Use repo
          </button>
        </div>
        <div className="choice">
          <span>
            From this computer{kind === "local" ? `: ${props.choice.kind === "local" ? props.choice.label : ""}` : ""}
          </span>
        </div>
        <div className="row wrap">
          {hasPicker && (
            <button type="button" onClick={() => void pickFolder()}>
              Open folder…
            </button>
          )}
          <label className="file">
            Folder
            <input
              type="file"
              aria-label="Model folder"
              {...{ webkitdirectory: "" }}
              onChange={(e) => onFiles(e.target.files)}
            />
          </label>
          <label className="file">
            Files
            <input type="file" aria-label="Model files" multiple onChange={(e) => onFiles(e.target.files)} />
          </label>
        </div>
      </fieldset>
      {p && (
        <div className="progress" data-testid="load-progress">
          <progress value={p.bytesDone} max={Math.max(1, p.bytesTotal)} aria-label={STAGE[p.stage]} />
          <span>
            {STAGE[p.stage]} {p.file}: {bytes(p.bytesDone)} / {bytes(p.bytesTotal)}
          </span>
        </div>
      )}
      {props.checking && <p className="muted">Reading config.json and planning memory…</p>}
      {props.error && (
        <p role="alert" className="error">
          {props.error}
        </p>
      )}
      {props.info && (
        <div data-testid="model-info">
          <p>
            <strong>{props.info.label}</strong>: {props.info.architecture}, {props.info.layers} layers, width{" "}
            {props.info.hidden}, vocab {props.info.vocab}, {props.info.dtype}
          </p>
          {props.info.totalBytes !== null ? (
            <details>
              <summary data-testid="plan-total">
                Memory plan: {bytes(props.info.totalBytes)} of {num(props.info.budgetBytes / 2 ** 30)} GiB budget
              </summary>
              <pre data-testid="plan">{props.info.plan.join("\n")}</pre>
            </details>
          ) : (
            <p data-testid="plan-total">Memory plan: refused ({num(props.info.budgetBytes / 2 ** 30)} GiB budget)</p>
          )}
          {!props.info.fits && (
            <p role="alert" className="error refused" data-testid="plan-refused">
              Refused: {props.info.reason}
            </p>
          )}
        </div>
      )}
    </section>
  );
}
