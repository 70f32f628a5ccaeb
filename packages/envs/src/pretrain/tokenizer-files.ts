// The Hugging Face files for a trained BPE: tokenizer.json (byte-level BPE, the split regex, added tokens)
// and tokenizer_config.json with a compact ChatML chat template (Qwen-style turns and tool calls).
import { Template } from "@huggingface/jinja";
import { SPLIT_PATTERN, type BpeTokenizer } from "./bpe.ts";
import type { Message, Tool } from "../types.ts";

/** Added tokens, in id order after the learned vocabulary (as Qwen orders them). */
export const SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"];
/** Added but not "special": kept when decoding with skip_special_tokens, so tool calls stay parseable. */
const NOT_SPECIAL = new Set(["<tool_call>", "</tool_call>"]);

/**
 * ChatML: `<|im_start|>role\ncontent<|im_end|>\n` per message; a generation prompt `<|im_start|>assistant\n`.
 * Tools go in the system message, with a one-line calling convention: as one JSON line each inside <tools> (as
 * Qwen2.5/Qwen3 write them), or, with `compactTools`, as one signature line each (`read_email(message_id: string)`,
 * an optional argument marked `?`): a small model's context cannot spend ~500 tokens on JSON Schema every turn.
 * Assistant tool calls render as `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` and tool results as
 * user turns wrapped in <tool_response>, as Qwen does (so the same parser works).
 */
export function chatTemplate(opts: { compactTools?: boolean } = {}): string {
  const tools = opts.compactTools
    ? `{{- '<|im_start|>system\\n' + (sys + '\\n\\n' if sys else '') + '# Tools' -}}
{%- for tool in tools -%}
{%- set f = tool.function -%}
{%- set params = f.parameters if f.parameters is defined and f.parameters else {} -%}
{%- set required = params.required if params.required is defined else [] -%}
{{- '\\n' + f.name + '(' -}}
{%- if params.properties is defined -%}
{%- for k, v in params.properties.items() -%}
{{- (', ' if not loop.first else '') + k + ('' if k in required else '?') + (': ' + v.type if v.type is defined else '') -}}
{%- endfor -%}
{%- endif -%}
{{- ')' -}}
{%- endfor -%}`
    : `{{- '<|im_start|>system\\n' + (sys + '\\n\\n' if sys else '') + '# Tools\\n<tools>' -}}
{%- for tool in tools %}{{ '\\n' + tool | tojson }}{% endfor -%}
{{- '\\n</tools>' -}}`;
  return TEMPLATE.replace("TOOLS", tools);
}

const TEMPLATE = `{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' -%}
{%- if tools -%}
TOOLS
{{- '\\nTo call a tool, answer <tool_call>\\n{"name": <name>, "arguments": <json object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif sys -%}
{{- '<|im_start|>system\\n' + sys + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' + (m.content if m.content else '') -}}
{%- if m.tool_calls -%}
{%- for tc in m.tool_calls -%}
{%- set f = tc.function if tc.function is defined else tc -%}
{{- ('\\n' if m.content or not loop.first else '') + '<tool_call>\\n{"name": "' + f.name + '", "arguments": ' -}}
{{- (f.arguments if f.arguments is string else f.arguments | tojson) + '}\\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif m.role == 'tool' -%}
{{- ('<|im_start|>user' if loop.first or messages[loop.index0 - 1].role != 'tool' else '') -}}
{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' -}}
{{- ('<|im_end|>\\n' if loop.last or messages[loop.index0 + 1].role != 'tool' else '') -}}
{%- elif not (loop.first and m.role == 'system') -%}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}`;

/** The template with tools as JSON lines (webart-tiny's). */
export const CHAT_TEMPLATE = chatTemplate();

const templates = new Map<boolean, Template>();

/** The chat template applied to messages (string contents), as the engine will apply it. */
export function renderChat(
  messages: Message[],
  opts: { tools?: Tool[]; addGenerationPrompt?: boolean; compactTools?: boolean } = {},
): string {
  const compact = opts.compactTools ?? false;
  let t = templates.get(compact);
  if (!t) templates.set(compact, (t = new Template(chatTemplate({ compactTools: compact }))));
  return t.render({ messages, tools: opts.tools, add_generation_prompt: opts.addGenerationPrompt ?? false });
}

const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };

/** tokenizer.json in the Hugging Face `tokenizers` format. */
export function tokenizerJson(tok: BpeTokenizer): Record<string, unknown> {
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: tok.specialTokens.map(({ id, content }) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: !NOT_SPECIAL.has(content),
    })),
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: tok.splitPattern ?? SPLIT_PATTERN }, behavior: "Isolated", invert: false },
        byteLevel,
      ],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(tok.vocab),
      merges: tok.merges,
    },
  };
}

/** tokenizer_config.json: eos `<|im_end|>`, pad `<|endoftext|>`, no bos, the ChatML template. */
export function tokenizerConfig(
  tok: BpeTokenizer,
  opts: { modelMaxLength?: number; compactTools?: boolean } = {},
): Record<string, unknown> {
  const decoder = Object.fromEntries(
    tok.specialTokens.map(({ id, content }) => [
      String(id),
      {
        content,
        lstrip: false,
        normalized: false,
        rstrip: false,
        single_word: false,
        special: !NOT_SPECIAL.has(content),
      },
    ]),
  );
  return {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: decoder,
    additional_special_tokens: ["<|im_start|>", "<|im_end|>"],
    bos_token: null,
    chat_template: chatTemplate({ compactTools: opts.compactTools }),
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    errors: "replace",
    model_max_length: opts.modelMaxLength ?? 2048,
    pad_token: "<|endoftext|>",
    split_special_tokens: false,
    tokenizer_class: "Qwen2Tokenizer",
    unk_token: null,
  };
}
