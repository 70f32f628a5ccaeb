// Tokenizer and chat template: tokenizer.json/tokenizer_config.json via @huggingface/tokenizers and @huggingface/jinja.
export { Tokenizer, type EncodeOptions, type DecodeOptions } from "./tokenizer.ts";
export {
  ChatTemplate,
  type ChatMessage,
  type ChatTemplateOptions,
  type ChatTemplateSource,
  type ContentPart,
  type ToolCall,
  type ToolSpec,
} from "./chat.ts";
export { StreamDecoder } from "./stream.ts";
