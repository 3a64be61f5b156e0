import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  elapsedSeconds,
  exitText,
  formatDuration,
  formatStep,
  formatTick,
  formatValue,
  launchText,
  recycledText,
  stateLabel,
} from "../src/monitor/format";
import type { Header } from "../src/monitor/protocol";

describe("format", () => {
  it("formats durations", () => {
    assert.equal(formatDuration(9.7), "9 s");
    assert.equal(formatDuration(185), "3 m 05 s");
    assert.equal(formatDuration(3725), "1 h 02 m");
    assert.equal(formatDuration(null), "");
  });

  it("formats metric values short but comparable", () => {
    assert.equal(formatValue(0.123456), "0.1235");
    assert.equal(formatValue(12), "12");
    assert.equal(formatValue(1.5e-7), "1.500e-7");
    assert.equal(formatValue(null), "–");
  });

  it("keeps axis ticks short", () => {
    assert.equal(formatTick(3e-4), "3e-4");
    assert.equal(formatTick(1.5e-4), "1.5e-4");
    assert.equal(formatTick(2.5e6), "2.5e6");
    assert.equal(formatTick(0.25), "0.25");
    assert.equal(formatTick(1200), "1200");
    assert.equal(formatTick(0), "0");
  });

  it("formats the step with its total", () => {
    assert.equal(formatStep(42, 100), "step 42 / 100");
    assert.equal(formatStep(42, null), "step 42");
    assert.equal(formatStep(null, null), "");
  });

  it("explains how a rank ended", () => {
    assert.match(exitText(null, "SIGKILL"), /out-of-memory/);
    assert.match(exitText(137, null), /SIGKILL/);
    assert.equal(exitText(1, null), "exit code 1");
    assert.equal(exitText(null, "SIGUSR1"), "ended by signal SIGUSR1");
  });

  it("measures elapsed time on the kernel's clock", () => {
    const header = { started: 1000, ended: null } as unknown as Header;
    assert.equal(elapsedSeconds(header, 500, 530), 30); // browser clock 500 s behind the kernel
    assert.equal(elapsedSeconds({ ...header, ended: 1010 }, 0, 99_999), 10);
    assert.equal(elapsedSeconds({ ...header, started: null }, 0, 0), null);
  });

  it("labels states, with Stopping while a cancel is in progress", () => {
    assert.equal(stateLabel("running", true), "Stopping");
    assert.equal(stateLabel("cancelled", true), "Cancelled");
    assert.equal(stateLabel("running", false), "Running");
  });

  it("says how a run was started: cold, or its warm gang and generation, and why that generation was recycled", () => {
    assert.equal(launchText(null), "cold");
    assert.equal(recycledText(null), "");
    assert.equal(launchText({ gang: "", generation: 0, recycled: "" }), "warm, gang starting");
    const warm = { gang: "gang-3fa9c2d1-0a1b2c", generation: 3, recycled: "" };
    assert.equal(launchText(warm), "warm gang-3fa9c2d1-0a1b2c · gen 3");
    assert.equal(recycledText(warm), "");
    assert.equal(
      recycledText({ ...warm, recycled: "rank 1 raised ValueError" }),
      "gang recycled after generation 3: rank 1 raised ValueError",
    );
  });
});
