import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { FailureWatch } from "../src/plugin/failures";
import { failureMessage, resumeCaption } from "../src/plugin/format";
import type { RunState, RunSummary } from "../src/plugin/wire";
import { parseAnswer } from "../src/monitor/search";

function run(id: string, state: RunState, extra: Partial<RunSummary> = {}): RunSummary {
  return {
    id, name: id.split("-")[0] ?? id, state, backend: "local", nodes: 1, procs: 2, worldSize: 2, created: 1,
    started: 1, ended: null, duration: 1, attempt: 0, step: null, total: null, failure: null, failedRank: null,
    notebook: null, trackingUrl: null, attachCode: "", canResume: false, detail: null, ...extra,
  };
}

describe("FailureWatch", () => {
  it("reports a run that failed while the page watched, once, and not the failures from before", () => {
    const watch = new FailureWatch();
    assert.deepEqual(watch.newlyFailed([run("old-1", "failed"), run("live-1", "running")], true), []);
    const failed = run("live-1", "failed", { failure: "rank 1 failed: ValueError: boom" });
    assert.deepEqual(watch.newlyFailed([run("old-1", "failed"), failed], true).map((r) => r.id), ["live-1"]);
    assert.deepEqual(watch.newlyFailed([failed], true), []);
    // a run new to the list that is already failed (it failed between two updates)
    assert.deepEqual(watch.newlyFailed([failed, run("fast-1", "failed")], true).map((r) => r.id), ["fast-1"]);
    assert.equal(failureMessage(failed), "live (live-1) failed: rank 1 failed: ValueError: boom");
  });
});

describe("resumeCaption", () => {
  it("says why Resume is disabled", () => {
    assert.match(resumeCaption(run("a-1", "failed")), /saved no checkpoint.*Run the cell again/);
    assert.match(resumeCaption(run("a-1", "failed", { canResume: true })), /latest checkpoint/);
    assert.match(resumeCaption(run("a-1", "running")), /still running/);
    assert.match(resumeCaption(run("a-1", "succeeded")), /nothing to resume/);
  });
});

describe("search answers", () => {
  it("are checked once", () => {
    const answer = parseAnswer({ matches: [{ rank: 1, line: 7, text: "x" }, 3], next: { rank: 1, line: 8 }, scanned: 8 });
    assert.deepEqual(answer, { matches: [{ rank: 1, line: 7, text: "x" }], next: { rank: 1, line: 8 }, scanned: 8 });
    assert.throws(() => parseAnswer({}), /no matches/);
  });
});
