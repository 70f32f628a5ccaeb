// The training settings: environment, reward (game score or RULER), and the numbers of a run, each validated
// with its message next to the field.
import type { ReactNode } from "react";
import type { DraftErrors, SettingsDraft } from "../lib/settings.ts";

function Field(props: {
  id: keyof SettingsDraft;
  label: string;
  error?: string;
  hint?: string;
  children: (a: { id: string; invalid: boolean; describedBy?: string }) => ReactNode;
}) {
  const id = `f-${props.id}`;
  const describedBy = props.error ? `${id}-err` : props.hint ? `${id}-hint` : undefined;
  return (
    <div className={`field${props.error ? " invalid" : ""}`}>
      <label htmlFor={id}>{props.label}</label>
      {props.children({ id, invalid: !!props.error, describedBy })}
      {props.error ? (
        <span id={`${id}-err`} className="field-error" data-testid={`error-${props.id}`}>
          {props.error}
        </span>
      ) : (
        props.hint && (
          <span id={`${id}-hint`} className="hint">
            {props.hint}
          </span>
        )
      )}
    </div>
  );
}

const NUMBERS: [keyof SettingsDraft, string, string?][] = [
  ["steps", "Steps", "training steps in all"],
  ["groupSize", "Group size", "games per scenario"],
  ["groupsPerStep", "Groups per step"],
  ["learningRate", "Learning rate"],
  ["loraRank", "LoRA rank"],
  ["seed", "Seed"],
  ["maxTokens", "Max tokens per move"],
  ["temperature", "Temperature"],
  ["opponents", "Opponents (tic-tac-toe)", "one per group in turn: random, winning, blocking, minimax"],
  ["memoryBudget", "GPU memory budget (GiB)", "4 is the browser default; the plan must fit it"],
];

export function SettingsForm(props: {
  draft: SettingsDraft;
  errors: DraftErrors;
  disabled: boolean;
  onChange: (d: SettingsDraft) => void;
}) {
  const { draft: d, errors: e } = props;
  const set = <K extends keyof SettingsDraft>(k: K, v: SettingsDraft[K]) => props.onChange({ ...d, [k]: v });
  return (
    <section className="panel" aria-labelledby="settings-h">
      <h2 id="settings-h">Training</h2>
      <fieldset disabled={props.disabled} className="settings">
        <Field id="name" label="Run name" error={e.name}>
          {(a) => (
            <input
              id={a.id}
              aria-invalid={a.invalid}
              aria-describedby={a.describedBy}
              value={d.name}
              onChange={(x) => set("name", x.target.value)}
            />
          )}
        </Field>
        <Field id="env" label="Environment">
          {(a) => (
            <select id={a.id} value={d.env} onChange={(x) => set("env", x.target.value as SettingsDraft["env"])}>
              <option value="tictactoe">Tic-tac-toe (vs. random)</option>
              <option value="2048">2048</option>
            </select>
          )}
        </Field>
        <Field id="reward" label="Reward" error={e.reward}>
          {(a) => (
            <select
              id={a.id}
              aria-invalid={a.invalid}
              aria-describedby={a.describedBy}
              value={d.reward}
              onChange={(x) => set("reward", x.target.value as SettingsDraft["reward"])}
            >
              <option value="env">The game's score</option>
              <option value="ruler">RULER (LLM judge)</option>
            </select>
          )}
        </Field>
        {d.reward === "ruler" && (
          <div className="ruler">
            <Field id="rulerBaseURL" label="Judge base URL" error={e.rulerBaseURL}>
              {(a) => (
                <input
                  id={a.id}
                  type="url"
                  aria-invalid={a.invalid}
                  aria-describedby={a.describedBy}
                  value={d.rulerBaseURL}
                  onChange={(x) => set("rulerBaseURL", x.target.value)}
                />
              )}
            </Field>
            <Field id="rulerModel" label="Judge model" error={e.rulerModel}>
              {(a) => (
                <input
                  id={a.id}
                  aria-invalid={a.invalid}
                  aria-describedby={a.describedBy}
                  value={d.rulerModel}
                  onChange={(x) => set("rulerModel", x.target.value)}
                />
              )}
            </Field>
            <Field id="rulerApiKey" label="API key" hint="kept in memory only, unless you tick the box below">
              {(a) => (
                <input
                  id={a.id}
                  type="password"
                  autoComplete="off"
                  aria-describedby={a.describedBy}
                  value={d.rulerApiKey}
                  onChange={(x) => set("rulerApiKey", x.target.value)}
                />
              )}
            </Field>
            <label className="check">
              <input type="checkbox" checked={d.rememberKey} onChange={(x) => set("rememberKey", x.target.checked)} />
              Remember the key on this device (browser storage)
            </label>
          </div>
        )}
        <div className="grid2">
          {NUMBERS.map(([k, label, hint]) => (
            <Field key={k} id={k} label={label} error={e[k]} hint={hint}>
              {(a) => (
                <input
                  id={a.id}
                  inputMode={k === "opponents" ? "text" : "decimal"}
                  aria-invalid={a.invalid}
                  aria-describedby={a.describedBy}
                  value={d[k] as string}
                  onChange={(x) => set(k, x.target.value)}
                />
              )}
            </Field>
          ))}
        </div>
      </fieldset>
    </section>
  );
}
