import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { RingBuffer } from "../src/monitor/ring";

describe("RingBuffer", () => {
  it("keeps the newest `capacity` items in order and counts what it dropped", () => {
    const ring = new RingBuffer<number>(3);
    for (let i = 0; i < 5; i++) ring.push(i);
    assert.deepEqual(ring.toArray(), [2, 3, 4]);
    assert.equal(ring.length, 3);
    assert.equal(ring.evicted, 2);
    assert.equal(ring.at(0), 2);
    assert.equal(ring.last(), 4);
    assert.equal(ring.at(3), undefined);
  });

  it("clears", () => {
    const ring = new RingBuffer<string>(2);
    ring.push("a");
    ring.clear();
    assert.deepEqual(ring.toArray(), []);
    assert.equal(ring.last(), undefined);
  });

  it("refuses a capacity below one", () => {
    assert.throws(() => new RingBuffer(0), RangeError);
  });
});
