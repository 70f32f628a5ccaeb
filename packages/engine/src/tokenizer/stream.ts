// Incremental detokenization for streaming: emits text as tokens arrive, holding back a token whose bytes end
// in an incomplete UTF-8 sequence (decoded as U+FFFD) until the rest arrives.
// It decodes a small window [prefix, end) and emits what the newest tokens add beyond the window's
// already-emitted prefix [prefix, read), so context-dependent decoders (leading spaces, byte fallback) agree
// with a full decode.

export class StreamDecoder {
  private ids: number[] = [];
  private prefix = 0; // start of the decode window
  private read = 0; // tokens up to here have been emitted

  constructor(private readonly decodeIds: (ids: number[]) => string) {}

  /** Adds token ids; returns the newly completed text ("" while a character is still incomplete). */
  push(ids: number | number[]): string {
    if (typeof ids === "number") this.ids.push(ids);
    else this.ids.push(...ids);
    const before = this.decodeIds(this.ids.slice(this.prefix, this.read));
    const now = this.decodeIds(this.ids.slice(this.prefix));
    if (now.length <= before.length || now.endsWith("\uFFFD")) return "";
    this.prefix = this.read;
    this.read = this.ids.length;
    return now.slice(before.length);
  }

  /** Ends the stream: whatever is held back, with U+FFFD for bytes that never completed. */
  flush(): string {
    if (this.read === this.ids.length) return "";
    const before = this.decodeIds(this.ids.slice(this.prefix, this.read));
    const now = this.decodeIds(this.ids.slice(this.prefix));
    this.prefix = this.read = this.ids.length;
    return now.slice(before.length);
  }

  /** All ids pushed so far. */
  get tokens(): readonly number[] {
    return this.ids;
  }
}
