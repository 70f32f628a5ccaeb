// The training settings: environment, reward (game score or RULER), and the numbers of a run, each validated
// with its message next to the field.
import type { ReactNode } from "react";
import { scenarioFormatOf } from "webart/envs";
import { DEFAULT_RUBRIC } from "webart/ruler";
import { exploresIn, switchEnv, type DraftErrors, type SettingsDraft } from "../lib/settings.ts";

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
  [
    "maxGroups",
    "Most groups drawn a step (games)",
    "more groups are drawn while fewer than the groups per step have games that score differently (empty: none more)",
  ],
  ["learningRate", "Learning rate"],
  ["beta", "KL penalty (beta)", "toward the base model; it also holds a decision start's opening (0: none)"],
  ["loraRank", "LoRA rank"],
  ["seed", "Seed"],
  ["maxTokens", "Max tokens per move"],
  ["temperature", "Temperature"],
  ["opponents", "Opponents (tic-tac-toe)", "one per group in turn: random, winning, blocking, minimax"],
  [
    "starts",
    "Starts (tic-tac-toe)",
    "one per group in turn: empty, or decision (an opening up to a move that matters; hold it with beta > 0)",
  ],
  [
    "decisionReward",
    "Decision reward (tic-tac-toe)",
    "added for each win taken and threat blocked, taken off for each missed, averaged over a game's (0: the outcome alone)",
  ],
  [
    "explore",
    "Exploration",
    "the chance a training move is a random empty cell (tic-tac-toe), or an answer a random sentence of the email read (email, guided calls); trained only when its episode beats the group's (0: none)",
  ],
  ["memoryBudget", "GPU memory budget (GiB)", "4 is the browser default; the plan must fit it"],
];

export function SettingsForm(props: {
  draft: SettingsDraft;
  errors: DraftErrors;
  disabled: boolean;
  /** Why the judge cannot be used (checked when Start is pressed), if it cannot. */
  judgeError?: string | null;
  onChange: (d: SettingsDraft) => void;
}) {
  const { draft: d, errors: e } = props;
  const set = <K extends keyof SettingsDraft>(k: K, v: SettingsDraft[K]) => props.onChange({ ...d, [k]: v });
  // Under the judge's fields, or under Reward when the loaded model is the judge; the email agent's context check
  // under Environment.
  const judgeError = props.judgeError && (
    <p className="field-error" role="alert" data-testid="error-judge">
      {props.judgeError}
    </p>
  );
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
            <select
              id={a.id}
              value={d.env}
              onChange={(x) => props.onChange(switchEnv(d, x.target.value as SettingsDraft["env"]))}
            >
              <option value="tictactoe">Tic-tac-toe (vs. random)</option>
              <option value="2048">2048</option>
              <option value="email">Email search (an agent with tools)</option>
              <option value="custom">Custom task (RULER)</option>
            </select>
          )}
        </Field>
        {d.env === "email" && judgeError}
        {d.env === "tictactoe" && (
          <label className="check">
            <input type="checkbox" checked={d.legalMoves} onChange={(x) => set("legalMoves", x.target.checked)} />
            Training moves among the legal ones (each asked with a guided_choice of the empty cells, trained over them;
            for agents played the same way)
          </label>
        )}
        {d.env === "email" && (
          <Field
            id="toolChoice"
            label="Tool calls"
            hint="forced: every turn is a call that fits a tool's schema (tool_choice required); guided: forced, and each value one the episode has shown (the question's words, the ids found, phrases of the emails read)"
          >
            {(a) => (
              <select
                id={a.id}
                value={d.toolChoice}
                onChange={(x) => set("toolChoice", x.target.value as SettingsDraft["toolChoice"])}
              >
                <option value="auto">The model's choice (auto)</option>
                <option value="required">Forced (required)</option>
                <option value="guided">Forced and guided (values from the episode)</option>
              </select>
            )}
          </Field>
        )}
        <Field id="reward" label="Reward" error={e.reward}>
          {(a) => (
            <select
              id={a.id}
              aria-invalid={a.invalid}
              aria-describedby={a.describedBy}
              value={d.reward}
              onChange={(x) => set("reward", x.target.value as SettingsDraft["reward"])}
            >
              {d.env !== "custom" && <option value="env">The game's score</option>}
              <option value="ruler">RULER (LLM judge)</option>
              {d.env === "custom" && <option value="self">RULER, judged by the loaded model itself</option>}
            </select>
          )}
        </Field>
        {d.reward === "self" && judgeError}
        {d.env === "custom" && (
          <CustomTaskFields draft={d} errors={e} set={set} patch={(p) => props.onChange({ ...d, ...p })} />
        )}
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
            {d.env !== "email" && judgeError}
            <label className="check">
              <input type="checkbox" checked={d.rememberKey} onChange={(x) => set("rememberKey", x.target.checked)} />
              Remember the key on this device (browser storage)
            </label>
          </div>
        )}
        <div className="grid2">
          {NUMBERS.filter(([k]) =>
            k === "explore"
              ? exploresIn(d)
              : (k !== "opponents" && k !== "starts" && k !== "decisionReward") || d.env === "tictactoe",
          ).map(([k, label, hint]) => (
            <Field key={k} id={k} label={label} error={e[k]} hint={hint}>
              {(a) => (
                <input
                  id={a.id}
                  inputMode={k === "opponents" || k === "starts" ? "text" : "decimal"}
                  aria-invalid={a.invalid}
                  aria-describedby={a.describedBy}
                  value={d[k] as string}
                  onChange={(x) => set(k, x.target.value)}
                />
              )}
            </Field>
          ))}
        </div>
        <label className="check">
          <input type="checkbox" checked={d.q4} onChange={(x) => set("q4", x.target.checked)} data-testid="q4" />
          4-bit base weights (q4: the model's weights in about 0.28 of their 16-bit memory; the run keeps training and
          is evaluated on them)
        </label>
      </fieldset>
    </section>
  );
}

/** A text input for a whole number (a numeric keyboard on phones). */
function WholeNumber(props: {
  a: { id: string; invalid: boolean; describedBy?: string };
  value: string;
  onChange: (v: string) => void;
}) {
  return (
    <input
      id={props.a.id}
      inputMode="numeric"
      aria-invalid={props.a.invalid}
      aria-describedby={props.a.describedBy}
      value={props.value}
      onChange={(x) => props.onChange(x.target.value)}
    />
  );
}

function TextArea(props: {
  a: { id: string; invalid: boolean; describedBy?: string };
  value: string;
  rows: number;
  placeholder?: string;
  onChange: (v: string) => void;
}) {
  return (
    <textarea
      id={props.a.id}
      rows={props.rows}
      aria-invalid={props.a.invalid}
      aria-describedby={props.a.describedBy}
      placeholder={props.placeholder}
      value={props.value}
      onChange={(x) => props.onChange(x.target.value)}
    />
  );
}

/** The custom task: system prompt, scenarios (typed or uploaded), rubric, turns and validation. */
function CustomTaskFields(props: {
  draft: SettingsDraft;
  errors: DraftErrors;
  set: <K extends keyof SettingsDraft>(k: K, v: SettingsDraft[K]) => void;
  patch: (p: Partial<SettingsDraft>) => void;
}) {
  const { draft: d, errors: e, set } = props;
  const upload = async (f: File) => {
    const text = await f.text();
    const format = scenarioFormatOf(f.name);
    // One change, so validation sees the text and its format together.
    props.patch({ scenarioText: text, scenarioFormat: format, scenarioFile: f.name });
  };
  return (
    <div className="custom-task" data-testid="custom-task">
      <Field id="systemPrompt" label="System prompt" error={e.systemPrompt}>
        {(a) => (
          <TextArea
            a={a}
            rows={3}
            placeholder="You are a support agent for Acme. Answer in two sentences at most."
            value={d.systemPrompt}
            onChange={(v) => set("systemPrompt", v)}
          />
        )}
      </Field>
      <Field
        id="scenarioText"
        label="Scenarios"
        error={e.scenarioText}
        hint="One prompt per line, or a JSONL/CSV file with a prompt field (other fields are shown to the judge only). 20% (at least 1) are held out for validation."
      >
        {(a) => (
          <TextArea
            a={a}
            rows={6}
            placeholder={"My order has not arrived.\nHow do I reset my password?"}
            value={d.scenarioText}
            onChange={(v) => set("scenarioText", v)}
          />
        )}
      </Field>
      <div className="row wrap">
        <label className="file">
          Upload scenarios (JSONL or CSV)
          <input
            type="file"
            accept=".jsonl,.ndjson,.csv,.txt,application/json,text/csv,text/plain"
            aria-label="Upload scenarios"
            onChange={(x) => {
              const f = x.target.files?.[0];
              if (f) void upload(f);
              x.target.value = "";
            }}
          />
        </label>
        <Field id="scenarioFormat" label="Scenario format">
          {(a) => (
            <select
              id={a.id}
              value={d.scenarioFormat}
              onChange={(x) => set("scenarioFormat", x.target.value as SettingsDraft["scenarioFormat"])}
            >
              <option value="lines">one prompt per line</option>
              <option value="jsonl">JSONL</option>
              <option value="csv">CSV</option>
            </select>
          )}
        </Field>
      </div>
      {d.scenarioFile && <p className="muted small">From {d.scenarioFile}</p>}
      <Field id="rubric" label="Rubric" hint="What a good answer is. Empty: RULER's default rubric.">
        {(a) => <TextArea a={a} rows={3} value={d.rubric} onChange={(v) => set("rubric", v)} />}
      </Field>
      <button type="button" className="small" onClick={() => set("rubric", DEFAULT_RUBRIC)}>
        Use ART's default rubric
      </button>
      <div className="grid2">
        <Field id="turns" label="Turns" error={e.turns} hint="assistant replies per conversation; 1 is single-turn">
          {(a) => <WholeNumber a={a} value={d.turns} onChange={(v) => set("turns", v)} />}
        </Field>
        <Field id="valEvery" label="Validate every (steps)" error={e.valEvery} hint="base model vs. checkpoint">
          {(a) => <WholeNumber a={a} value={d.valEvery} onChange={(v) => set("valEvery", v)} />}
        </Field>
      </div>
      <Field
        id="warmStart"
        label="Warm start (epochs)"
        error={e.warmStart}
        hint={'supervised passes over the scenarios\' "answer" field before GRPO, a step each (0: none)'}
      >
        {(a) => <WholeNumber a={a} value={d.warmStart} onChange={(v) => set("warmStart", v)} />}
      </Field>
      {Number(d.turns) > 1 && (
        <Field
          id="userPrompt"
          label="User simulator prompt"
          error={e.userPrompt}
          hint="The simulated user is the loaded model itself, prompted with this."
        >
          {(a) => <TextArea a={a} rows={2} value={d.userPrompt} onChange={(v) => set("userPrompt", v)} />}
        </Field>
      )}
    </div>
  );
}
