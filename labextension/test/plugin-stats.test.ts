import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { shortDuration, statsLines, windowText } from "../src/plugin/stats";

// The document nbtrain/stats/render.py writes for the runs of tests/unit/stats/test_compute.py (_fixture_document),
// which checks that this file is still what the renderer writes.
const DOC = JSON.parse(
  readFileSync(new URL("../../../tests/data/stats-document.json", import.meta.url), "utf8"),
) as Record<string, unknown>;

describe("adoption figures", () => {
  it("turns the stats document into the panel's lines", () => {
    assert.deepEqual(
      statsLines(DOC)?.map((line) => [line.label, line.value]),
      [
        ["First distributed run (ada)", "30.0 d"],
        ["Success rate", "66.7% (2 of 3)"],
        ["Time to recover", "6.7 min mean (1 recovered, 1 open)"],
        ["Queue wait", "10 s median, 30 s p90 (3)"],
        ["Templates", "not recorded"],
        ["Checkpoint recovery", "100.0% (1 of 1)"],
        ["Gang-hours (local)", "0.29 process-h"],
        ["Gang-hours (slurm)", "8.00 process-h, 8.00 GPU-h"],
      ],
    );
    assert.equal(windowText(DOC), "last 30 days");
  });

  it("shows dashes for figures with nothing to count, and refuses what is not a stats document", () => {
    const empty = {
      ...DOC, users: [], backends: [], window: { start: null, seconds: null },
      runs: { total: 0, succeeded: 0, failed: 0, cancelled: 0, live: 0, success_rate: null },
      recovery: { ...(DOC.recovery as object), recovered: 0, unrecovered: 0, time_to_recover_s: { count: 0, mean: null } },
      queue_wait_s: { count: 0, total: 0, mean: null, p50: null, p90: null, max: null },
      checkpoint_recovery: { resumed_attempts: 0, from_checkpoint: 0, succeeded: 0, rate: null },
      templates: { recorded: true, runs: 0, share: null },
    };
    const values = Object.fromEntries((statsLines(empty) ?? []).map((line) => [line.label, line.value]));
    assert.deepEqual(values, {
      "Success rate": "– (0 of 0)",
      "Time to recover": "– mean (0 recovered, 0 open)",
      "Queue wait": "–",
      Templates: "– of runs",
      "Checkpoint recovery": "– (0 of 0)",
    });
    assert.equal(windowText(empty), "every run");
    assert.equal(statsLines({ runs: [] }), null);
    assert.equal(statsLines(null), null);
  });

  it("formats durations short", () => {
    assert.deepEqual([5, 400, 3 * 3600, 3 * 86400].map(shortDuration), ["5 s", "6.7 min", "3.0 h", "3.0 d"]);
  });
});
