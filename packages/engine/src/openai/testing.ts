// Test helpers (Node only): a tiny random Llama model whose tokenizer and chat template follow Llama 3.1's
// conventions (header tokens, <|eot_id|>/<|eom_id|>, <|python_tag|>, JSON tool calls with "parameters"),
// built from the embedded model's byte-level BPE with Llama 3's special tokens in place of ChatML's.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { randomTensors, tinyConfigJson, writeModelDir } from "../weights/testing.ts";

const EMBEDDED = join(import.meta.dirname, "../../../../models/webart-tiny");

/** Llama 3's special tokens, after the embedded tokenizer's 401 byte-level BPE tokens. */
export const LLAMA3_TOKENS = {
  "<|begin_of_text|>": 401,
  "<|end_of_text|>": 402,
  "<|start_header_id|>": 403,
  "<|end_header_id|>": 404,
  "<|eom_id|>": 405,
  "<|eot_id|>": 406,
  "<|python_tag|>": 407,
} as const;

/**
 * A chat template in Llama 3.1's form: the system header (with "Environment: ipython" when there are tools),
 * the tools as JSON in the first user message with the instruction to answer
 * {"name": function name, "parameters": {...}}, an assistant call written back as that JSON (its arguments
 * through `tojson`), and tool results as ipython messages.
 */
export const LLAMA3_CHAT_TEMPLATE = `{{- bos_token }}
{%- if tools is not defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0].role == 'system' %}
{%- set system = messages[0].content | trim %}{%- set messages = messages[1:] %}
{%- else %}{%- set system = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\n\\n' + system + '<|eot_id|>' }}
{%- for m in messages %}
{%- if m.role == 'tool' or m.role == 'ipython' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' }}
{%- elif m.tool_calls %}
{%- set f = m.tool_calls[0].function %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + f.name + '", "parameters": ' }}
{{- (f.arguments | tojson) + '}<|eot_id|>' }}
{%- elif loop.first and tools is not none and m.role == 'user' %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, respond with a JSON for a ' }}
{{- 'function call with its proper arguments that best answers the given prompt.\\n\\nRespond in the format ' }}
{{- '{"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\\n\\n' }}
{%- for t in tools %}{{- (t | tojson(indent=4)) + '\\n\\n' }}{%- endfor %}
{{- (m.content | trim) + '<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + (m.content | trim) + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}`;

/** Writes the tiny Llama 3 model to `dir`: random weights (C=8, L=2), context 2048, stop ids as Llama 3.1's. */
export async function writeLlama3Model(dir: string, seed = 3): Promise<void> {
  const tokenizer = JSON.parse(await readFile(join(EMBEDDED, "tokenizer.json"), "utf8")) as {
    added_tokens: Record<string, unknown>[];
  };
  tokenizer.added_tokens = Object.entries(LLAMA3_TOKENS).map(([content, id]) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  const config = tinyConfigJson("llama", {
    vocab_size: 408,
    max_position_embeddings: 2048,
    bos_token_id: LLAMA3_TOKENS["<|begin_of_text|>"],
    eos_token_id: [LLAMA3_TOKENS["<|end_of_text|>"], LLAMA3_TOKENS["<|eom_id|>"], LLAMA3_TOKENS["<|eot_id|>"]],
  });
  await writeModelDir(dir, config, randomTensors(config, "BF16", seed), {
    files: {
      "tokenizer.json": JSON.stringify(tokenizer),
      "tokenizer_config.json": JSON.stringify({
        bos_token: "<|begin_of_text|>",
        eos_token: "<|eot_id|>",
        chat_template: LLAMA3_CHAT_TEMPLATE,
      }),
    },
  });
}
