// Stop strings (OpenAI `stop`): text is released as it is decoded, holding back a tail that might still
// become a stop string, and cut at the first one.

/**
 * Incremental stop-string matcher: feed text as it is decoded; it returns what can be shown now,
 * holding back a tail that might still become a stop string.
 */
export class StopMatcher {
  private held = "";
  stopped = false;

  constructor(private stops: string[]) {}

  push(text: string): string {
    if (this.stopped) return "";
    const buf = this.held + text;
    let cut = -1;
    for (const s of this.stops) {
      const i = buf.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    if (cut >= 0) {
      this.stopped = true;
      this.held = "";
      return buf.slice(0, cut);
    }
    let keep = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, buf.length); k > keep; k--) {
        if (buf.endsWith(s.slice(0, k))) {
          keep = k;
          break;
        }
      }
    }
    this.held = buf.slice(buf.length - keep);
    return buf.slice(0, buf.length - keep);
  }

  /** Whatever is held back, at the end of generation. */
  flush(): string {
    const h = this.stopped ? "" : this.held;
    this.held = "";
    return h;
  }
}
