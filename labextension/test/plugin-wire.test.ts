import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { activeRunsText, exportMessage, gangText, liveDuration, stepText } from "../src/plugin/format";
import { isActive, parseErrorBody, parseExportResult, parseRunList, parseRunSummary } from "../src/plugin/wire";

// The rows the Python tests validate against nbtrain/schemas/run-summary.schema.json (one fixture file for
// both sides). This file runs compiled as labextension/build/test/plugin-wire.test.mjs.
const FIXTURES: unknown = JSON.parse(
  readFileSync(new URL("../../../tests/data/wire/run-summaries.json", import.meta.url), "utf-8"),
);

function camel(key: string): string {
  return key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

// a row as nbtrain/server/runs.py:run_summary writes it
const ROW = {
  id: "digits-3fa9c2", name: "digits", state: "running", backend: "local", nodes: 2, procs: 2, world_size: 4,
  created: 1764455000.0, started: 1764455001.5, ended: null, duration: 12.5, attempt: 0, step: 42, total: 100,
  failure: null, failed_rank: null, notebook: "train.ipynb", tracking_url: null,
  attach_code: "import nbtrain\nrun = nbtrain.attach('digits-3fa9c2')\nrun.show()", can_resume: false, detail: null,
};

describe("wire", () => {
  it("parses a server row", () => {
    const run = parseRunSummary(ROW);
    assert.ok(run);
    assert.equal(run.worldSize, 4);
    assert.equal(run.attachCode, ROW.attach_code);
    assert.equal(run.trackingUrl, null);
    assert.equal(gangText(run), "local · 2 × 2 = 4 ranks");
    assert.equal(stepText(run), "step 42 / 100");
  });

  it("parses every shared fixture field for field (snake_case on the wire, camelCase here)", () => {
    assert.ok(Array.isArray(FIXTURES) && FIXTURES.length > 0);
    for (const row of FIXTURES as Record<string, unknown>[]) {
      const expected = Object.fromEntries(Object.entries(row).map(([key, value]) => [camel(key), value]));
      assert.deepEqual(parseRunSummary(row), expected);
    }
    const failed = parseRunList({ runs: FIXTURES }).find((r) => r.state === "failed");
    assert.ok(failed);
    assert.equal(failed.failedRank, 1);
    assert.match(failed.failure ?? "", /^rank 1 /);
    const queued = parseRunList({ runs: FIXTURES }).find((r) => r.state === "queued");
    assert.ok(queued);
    assert.match(queued.detail ?? "", /^queued: Resources \(position 2 of 3/);
    const stalled = parseRunList({ runs: FIXTURES }).find((r) => r.state === "stalled");
    assert.ok(stalled);
    assert.ok(isActive(stalled.state), "a stalled run is still live: it ticks and can be cancelled");
    assert.match(stalled.detail ?? "", /^stalled: rank 1 /);
  });

  it("keeps a failed rank only when it is a rank number", () => {
    for (const bad of [-1, 1.5, "1", Number.NaN, undefined]) {
      assert.equal(parseRunSummary({ ...ROW, failed_rank: bad })?.failedRank, null);
    }
    assert.equal(parseRunSummary({ ...ROW, failed_rank: 0 })?.failedRank, 0);
  });

  it("drops rows without an id or a known state, keeps the rest of the list", () => {
    const runs = parseRunList({ runs: [ROW, { ...ROW, id: "" }, { ...ROW, id: "x", state: "exploded" }, null] });
    assert.deepEqual(runs.map((r) => r.id), ["digits-3fa9c2"]);
    assert.deepEqual(parseRunList({ nope: 1 }), []);
  });

  it("fills in what an older server does not send", () => {
    const run = parseRunSummary({ id: "a-1", state: "succeeded" });
    assert.ok(run);
    assert.equal(run.worldSize, 1);
    assert.equal(run.failedRank, null);
    assert.match(run.attachCode, /nbtrain\.attach\("a-1"\)/);
  });

  it("names the key files of an export and counts the rest (a notification is cut at 140 characters)", () => {
    const files = ["README.md", "accelerate.yaml", "job.sbatch", "k8s", "nbtrain.toml", "train.py"];
    assert.equal(exportMessage("a.ipynb", { path: "a-job", files }), "Exported a.ipynb to a-job/: train.py, README.md, job.sbatch and 3 more");
    assert.equal(exportMessage("a.ipynb", { path: "a-job", files: ["x", "y"] }), "Exported a.ipynb to a-job/: 2 files");
    assert.equal(exportMessage("a.ipynb", { path: "a-job", files: ["train.py"] }), "Exported a.ipynb to a-job/: train.py");
  });

  it("says which cell was exported, that the notebook was saved first, and the server's notes", () => {
    const job = { path: "a-job", files: ["train.py"], cell: "cell 4 (id c4)", notes: ["2 %%distributed cells: exported the last."] };
    assert.equal(exportMessage("a.ipynb", job, true),
      "Saved a.ipynb, then exported cell 4 of a.ipynb to a-job/: train.py 2 %%distributed cells: exported the last.");
    assert.equal(exportMessage("a.ipynb", { ...job, notes: [] }), "Exported cell 4 of a.ipynb to a-job/: train.py");
  });

  it("parses export answers and errors", () => {
    assert.deepEqual(parseExportResult({ path: "nb-job", files: ["train.py", 3] }), { path: "nb-job", files: ["train.py"] });
    assert.equal(parseExportResult({ files: [] }), null);
    assert.deepEqual(parseExportResult({ path: "nb-job", files: [], cell: "cell 2", notes: ["n", 1] }),
      { path: "nb-job", files: [], cell: "cell 2", notes: ["n"] });
    assert.deepEqual(parseErrorBody({ error: "SpecError", message: "bad" }), { error: "SpecError", message: "bad" });
  });

  it("counts live durations on from when the row arrived, and stops at the end", () => {
    const run = parseRunSummary(ROW);
    assert.ok(run);
    assert.equal(liveDuration(run, 100, 103), 15.5);
    assert.equal(liveDuration({ ...run, state: "succeeded" }, 100, 200), 12.5);
    assert.equal(isActive("queued"), true);
    assert.equal(isActive("cancelled"), false);
    assert.equal(activeRunsText(1), "nbtrain: 1 active run");
    assert.equal(activeRunsText(0), "nbtrain: 0 active runs");
  });
});
