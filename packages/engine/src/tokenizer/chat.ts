// Chat messages in the OpenAI shape and their rendering through the model's Jinja chat template
// (tokenizer_config.json's chat_template, or chat_template.jinja), as transformers' apply_chat_template does.

import { Template } from "@huggingface/jinja";

export interface ToolCall {
  id?: string;
  type?: "function";
  /** arguments: a JSON string (OpenAI) or an object (transformers); templates render both. */
  function: { name: string; arguments: string | Record<string, unknown> };
}

export type ContentPart = { type: "text"; text: string } | { type: string; [k: string]: unknown };

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  /** null (an assistant turn that only calls tools) renders as "". Text parts are joined. */
  content?: string | ContentPart[] | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
  /** Thinking text of an assistant turn, for templates that render it (Qwen3). */
  reasoning_content?: string;
}

export interface ToolSpec {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface ChatTemplateOptions {
  tools?: ToolSpec[];
  /** End with the header of an assistant turn, ready for generation. Default false. */
  addGenerationPrompt?: boolean;
  /** Other template variables, passed through verbatim, e.g. `enable_thinking: false` for Qwen3. */
  [kwarg: string]: unknown;
}

/** A tokenizer_config chat_template: one template, or a list of named ones ("default", "tool_use", ...). */
export type ChatTemplateSource = string | { name: string; template: string }[];

export class ChatTemplate {
  private readonly compiled = new Map<string, Template>();

  constructor(
    private readonly source: ChatTemplateSource,
    /** Special-token strings the templates may use: bos_token, eos_token, pad_token, unk_token. */
    private readonly specialTokens: Record<string, string | null>,
  ) {}

  private pick(hasTools: boolean): string {
    if (typeof this.source === "string") return this.source;
    const byName = new Map(this.source.map((t) => [t.name, t.template]));
    const t = (hasTools && byName.get("tool_use")) || byName.get("default");
    if (!t) throw new Error(`chat_template has no "default" template (has: ${[...byName.keys()].join(", ")})`);
    return t;
  }

  render(messages: ChatMessage[], opts: ChatTemplateOptions = {}): string {
    const { tools, addGenerationPrompt = false, ...kwargs } = opts;
    const src = this.pick(!!tools?.length);
    let tpl = this.compiled.get(src);
    if (!tpl) {
      tpl = new Template(src);
      this.compiled.set(src, tpl);
    }
    return tpl.render({
      ...this.specialTokens,
      messages: messages.map(normalize),
      ...(tools ? { tools } : {}),
      add_generation_prompt: addGenerationPrompt,
      ...kwargs,
    });
  }
}

// Templates do string operations on content ('</think>' in content), so content is always a string here.
// OpenAI's `developer` role is its newer name for `system`; open models' templates know only `system` (Qwen's
// drop or mis-render other roles), so a developer message renders as the system message.
function normalize(m: ChatMessage): Record<string, unknown> {
  const { content } = m;
  const text =
    content == null
      ? ""
      : typeof content === "string"
        ? content
        : content
            .map((p) => {
              if (p.type === "text" && typeof p.text === "string") return p.text;
              throw new Error(`chat message content part of type "${p.type}" is not supported (supported: text)`);
            })
            .join("");
  const out: Record<string, unknown> = { ...m, role: m.role === "developer" ? "system" : m.role, content: text };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}
