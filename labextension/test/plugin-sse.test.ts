import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { EventStreamParser } from "../src/plugin/sse";

describe("EventStreamParser", () => {
  it("returns the data of complete events and skips keep-alive comments", () => {
    const parser = new EventStreamParser();
    assert.deepEqual(parser.push('data: {"runs": []}\n\n: keep-alive\n\n'), ['{"runs": []}']);
    assert.deepEqual(parser.push(": keep-alive\n\n"), []);
  });

  it("joins chunks split anywhere, CRLF included", () => {
    const parser = new EventStreamParser();
    const stream = 'data: {"a":\r\ndata: 1}\r\n\r\ndata:x\r\n\r\n';
    const events: string[] = [];
    for (const char of stream) events.push(...parser.push(char));
    assert.deepEqual(events, ['{"a":\n1}', "x"]);
  });

  it("ignores other fields and waits for the blank line", () => {
    const parser = new EventStreamParser();
    assert.deepEqual(parser.push("event: update\nid: 3\nretry: 10\ndata: one\n"), []);
    assert.deepEqual(parser.push("\n"), ["one"]);
  });
});
