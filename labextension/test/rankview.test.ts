import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { describeRank, isDetailed, startsCollapsed, summarizeNode } from "../src/monitor/rankview";

describe("describeRank", () => {
  it("explains a straggler with how far it is behind the median", () => {
    const cell = describeRank([3, "running", 12, 0.4, 1], 50);
    assert.equal(cell.straggler, true);
    assert.equal(cell.behind, 38);
    assert.match(cell.title, /straggler: 38 steps behind the median \(50\)/);
    assert.equal(cell.step, "12");
    assert.equal(cell.age, "0.4 s");
  });

  it("says how long a stalled rank has been silent, counting on between syncs", () => {
    const cell = describeRank([1, "stalled", 40, 58, 0], 41, 5);
    assert.equal(cell.age, "63 s");
    assert.match(cell.title, /no sign of life for 63 s/);
    assert.equal(cell.straggler, false);
  });

  it("does not age finished ranks, and shows unknown steps as a dash", () => {
    const cell = describeRank([0, "done", null, 2, 0], null, 100);
    assert.equal(cell.age, "2.0 s");
    assert.equal(cell.step, "–");
    assert.equal(cell.behind, null);
  });

  it("is not behind when at or ahead of the median", () => {
    assert.equal(describeRank([2, "running", 60, 0, 0], 50).behind, null);
  });
});

describe("summarizeNode", () => {
  it("counts states, worst first, and stragglers", () => {
    const summary = summarizeNode({
      node: 1,
      ranks: [
        [4, "running", 10, 0.1, 0],
        [5, "failed", 3, 1, 0],
        [6, "running", 2, 0.2, 1],
        [7, "stalled", 9, 70, 0],
      ],
    });
    assert.equal(summary.worst, "failed");
    assert.equal(summary.stragglers, 1);
    assert.equal(summary.text, "node 1 · 4 ranks: 1 failed, 1 stalled, 2 running · 1 straggler");
  });
});

describe("ended runs", () => {
  it("rank ages stop counting once a rank is stopped, and stopped ranks rank below running ones", () => {
    assert.equal(describeRank([0, "stopped", 7, 3, 0], 7, 50).age, "3.0 s");
    const summary = summarizeNode({ node: 0, ranks: [[0, "stopped", 7, 3, 0], [1, "done", 9, 1, 0]] });
    assert.equal(summary.worst, "stopped");
    assert.equal(summary.text, "node 0 · 2 ranks: 1 stopped, 1 done");
  });
});

describe("big gangs", () => {
  it("switch to compact cells and collapsed nodes above 64 ranks", () => {
    assert.equal(isDetailed(64), true);
    assert.equal(isDetailed(512), false);
    assert.equal(startsCollapsed(16), false);
    assert.equal(startsCollapsed(512), true);
  });
});
