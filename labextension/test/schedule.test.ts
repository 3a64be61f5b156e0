import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { FrameScheduler, type Timers } from "../src/monitor/schedule";

/** Manual timers: frames and delays run only when the test says so. */
function fakeTimers(): Timers & { t: number; flushFrames(): void; advance(ms: number): void } {
  let nextId = 1;
  const frames = new Map<number, () => void>();
  const delays = new Map<number, { at: number; callback: () => void }>();
  const timers = {
    t: 0,
    now: () => timers.t,
    frame: (callback: () => void) => {
      frames.set(nextId, callback);
      return nextId++;
    },
    cancelFrame: (id: number) => void frames.delete(id),
    delay: (callback: () => void, ms: number) => {
      delays.set(nextId, { at: timers.t + ms, callback });
      return nextId++;
    },
    cancelDelay: (id: number) => void delays.delete(id),
    flushFrames: () => {
      const due = [...frames.values()];
      frames.clear();
      for (const callback of due) callback();
    },
    advance: (ms: number) => {
      timers.t += ms;
      for (const [id, delay] of [...delays]) {
        if (delay.at <= timers.t) {
          delays.delete(id);
          delay.callback();
        }
      }
    },
  };
  return timers;
}

describe("FrameScheduler", () => {
  it("coalesces many requests into one draw per frame", () => {
    const timers = fakeTimers();
    let draws = 0;
    const scheduler = new FrameScheduler(() => draws++, 100, timers);
    for (let i = 0; i < 50; i++) scheduler.request();
    timers.flushFrames();
    assert.equal(draws, 1);
  });

  it("draws at most once per interval (10 per second)", () => {
    const timers = fakeTimers();
    let draws = 0;
    const scheduler = new FrameScheduler(() => draws++, 100, timers);
    for (let ms = 0; ms < 1000; ms += 5) {
      scheduler.request();
      timers.flushFrames();
      timers.advance(5);
    }
    assert.ok(draws >= 9 && draws <= 10, `drew ${draws} times in one second`);
  });

  it("draws nothing after dispose", () => {
    const timers = fakeTimers();
    let draws = 0;
    const scheduler = new FrameScheduler(() => draws++, 100, timers);
    scheduler.request();
    scheduler.dispose();
    timers.flushFrames();
    assert.equal(draws, 0);
  });
});
