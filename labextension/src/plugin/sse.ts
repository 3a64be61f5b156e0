/**
 * An incremental parser of a server-sent events stream (pure; the WHATWG "event stream" format, the
 * part nbtrain's `/nbtrain/events` uses: `data:` lines, `:` comments as keep-alives, blank line ends
 * an event). Chunks may split lines and even CRLF pairs anywhere.
 */
export class EventStreamParser {
  private buffer = "";
  private data: string[] = [];

  /** Feed a decoded chunk; returns the data of every event it completed, in order. */
  push(chunk: string): string[] {
    this.buffer += chunk;
    const events: string[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (match === null) break;
      // a lone CR at the very end may be the first half of a CRLF: wait for the next chunk
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      if (line === "") {
        if (this.data.length > 0) events.push(this.data.join("\n"));
        this.data = [];
      } else if (line.startsWith(":")) {
        continue; // comment (keep-alive)
      } else {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") this.data.push(value);
        // `event`, `id` and `retry` are not used by nbtrain's stream
      }
    }
    return events;
  }
}
