// The model's tokenizer: tokenizer.json through @huggingface/tokenizers, special tokens from
// tokenizer_config.json, the chat template, and a streaming decoder.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { ChatTemplate, type ChatMessage, type ChatTemplateOptions, type ChatTemplateSource } from "./chat.ts";
import { StreamDecoder } from "./stream.ts";

export interface EncodeOptions {
  /**
   * Add the post-processor's special tokens (e.g. Llama 3's BOS). Default false: chat templates already write
   * every special token, and the engine mostly encodes rendered templates.
   */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special tokens (<|im_end|>, ...); non-special added tokens like <tool_call> stay. Default false. */
  skipSpecialTokens?: boolean;
}

type Json = Record<string, unknown>;

// tokenizer_config.json writes special tokens as a string or as {"content": ..., "__type": "AddedToken"}.
function tokenString(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (typeof v === "object" && v !== null && typeof (v as Json).content === "string")
    return (v as Json).content as string;
  return null;
}

export class Tokenizer {
  /** Every token id the model can see or emit, added tokens included. */
  readonly vocabSize: number;
  readonly bosToken: string | null;
  readonly eosToken: string | null;
  readonly padToken: string | null;
  readonly unkToken: string | null;
  readonly bosId: number | null;
  readonly eosId: number | null;
  readonly padId: number | null;
  /** Ids of added tokens marked special (what skipSpecialTokens drops). */
  readonly specialIds: ReadonlySet<number>;
  /** Whether a chat template is available (applyChatTemplate throws otherwise). */
  readonly hasChatTemplate: boolean;
  /** The chat template's source (one template, or named ones), null without one. */
  readonly chatTemplate: ChatTemplateSource | null;
  private readonly chat: ChatTemplate | null;

  private constructor(
    private readonly hf: HfTokenizer,
    config: Json,
    chatTemplate: ChatTemplateSource | null,
  ) {
    this.vocabSize = hf.get_vocab(true).size;
    this.bosToken = tokenString(config.bos_token);
    this.eosToken = tokenString(config.eos_token);
    this.padToken = tokenString(config.pad_token);
    this.unkToken = tokenString(config.unk_token);
    const id = (t: string | null) => (t === null ? null : (this.tokenToId(t) ?? null));
    this.bosId = id(this.bosToken);
    this.eosId = id(this.eosToken);
    this.padId = id(this.padToken);
    this.specialIds = new Set([...hf.get_added_tokens_decoder().values()].filter((t) => t.special).map((t) => t.id));
    this.chat = chatTemplate
      ? new ChatTemplate(chatTemplate, {
          bos_token: this.bosToken,
          eos_token: this.eosToken,
          pad_token: this.padToken,
          unk_token: this.unkToken,
        })
      : null;
    this.hasChatTemplate = this.chat !== null;
    this.chatTemplate = chatTemplate;
  }

  /**
   * From tokenizer.json and tokenizer_config.json (parsed). `chatTemplate` overrides the config's
   * chat_template, e.g. with the text of a chat_template.jinja file.
   */
  static fromJSON(
    tokenizerJson: object,
    tokenizerConfig: object = {},
    opts: { chatTemplate?: string | null } = {},
  ): Tokenizer {
    const config = tokenizerConfig as Json;
    const model = (tokenizerJson as Json).model;
    if (typeof model !== "object" || model === null)
      throw new Error("tokenizer.json: no model section (is this a fast-tokenizer file?)");
    const template = opts.chatTemplate ?? (config.chat_template as ChatTemplateSource | undefined) ?? null;
    return new Tokenizer(new HfTokenizer(tokenizerJson, tokenizerConfig), config, template);
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    return this.hf.encode(text, { add_special_tokens: opts.addSpecialTokens ?? false }).ids;
  }

  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    if (ids.length === 0) return ""; // the library rejects an empty list
    return this.hf.decode(Array.from(ids), { skip_special_tokens: opts.skipSpecialTokens ?? false });
  }

  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  /** Renders messages (and tools) with the model's chat template, as transformers' apply_chat_template(tokenize=False). */
  applyChatTemplate(messages: ChatMessage[], opts: ChatTemplateOptions = {}): string {
    if (!this.chat)
      throw new Error(
        "this tokenizer has no chat template (tokenizer_config.json chat_template or chat_template.jinja)",
      );
    return this.chat.render(messages, opts);
  }

  /** Token ids of the rendered chat (no extra special tokens: the template writes them). */
  encodeChat(messages: ChatMessage[], opts: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, opts));
  }

  /** A decoder that turns ids into text as they are generated. */
  streamDecoder(opts: DecodeOptions = {}): StreamDecoder {
    return new StreamDecoder((ids) => this.decode(ids, opts));
  }
}
