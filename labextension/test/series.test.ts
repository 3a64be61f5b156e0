import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Series, decimate } from "../src/monitor/series";

const ramp = (n: number): [number, number][] => Array.from({ length: n }, (_, i) => [i, Math.sin(i / 50)]);

describe("decimate", () => {
  it("returns short series unchanged", () => {
    const out = decimate([1, 2, 3], [4, 5, 6], 10);
    assert.deepEqual(out, { xs: [1, 2, 3], ys: [4, 5, 6] });
  });

  it("keeps at most maxPoints, the first and last point, in x order", () => {
    const xs = Array.from({ length: 100_000 }, (_, i) => i);
    const ys = xs.map((x) => Math.cos(x / 300));
    const out = decimate(xs, ys, 2000);
    assert.ok(out.xs.length <= 2000 && out.xs.length > 1900, `got ${out.xs.length}`);
    assert.equal(out.xs[0], 0);
    assert.equal(out.xs[out.xs.length - 1], 99_999);
    for (let i = 1; i < out.xs.length; i++) assert.ok((out.xs[i] as number) > (out.xs[i - 1] as number));
  });

  it("keeps a one-point spike (min/max per bucket, not striding)", () => {
    const xs = Array.from({ length: 50_000 }, (_, i) => i);
    const ys = xs.map((x) => (x === 31_337 ? 1e6 : -x * 1e-9));
    const out = decimate(xs, ys, 500);
    assert.ok(out.ys.includes(1e6));
    assert.ok(out.xs.includes(31_337));
  });

  it("turns an all-missing bucket into a gap instead of inventing values", () => {
    const xs = Array.from({ length: 1000 }, (_, i) => i);
    const ys = xs.map((x) => (x >= 400 && x < 600 ? null : 1));
    const out = decimate(xs, ys, 20);
    assert.ok(out.ys.includes(null));
    assert.ok(out.ys.every((y) => y === null || y === 1));
  });
});

describe("Series", () => {
  it("appends streamed points and reports what it holds", () => {
    const s = new Series();
    s.append([[0, 1], [1, 0.5]]);
    s.append([[2, 0.25]]);
    assert.equal(s.length, 3);
    assert.equal(s.lastStep, 2);
    assert.equal(s.lastValue, 0.25);
    assert.deepEqual(s.drawn(), { xs: [0, 1, 2], ys: [1, 0.5, 0.25] });
  });

  it("draws at most drawMax points and stays bounded in memory on a long run", () => {
    const s = new Series(8000, 2000);
    for (let chunk = 0; chunk < 100; chunk++) {
      s.append(ramp(1000).map(([x, y]) => [x + chunk * 1000, y]));
      assert.ok(s.length <= 8000);
    }
    assert.ok(s.drawn().xs.length <= 2000);
    assert.equal(s.lastStep, 99_999);
    assert.equal(s.drawn().xs[0], 0);
  });

  it("replaces the value of a repeated last step", () => {
    const s = new Series();
    s.append([[0, 1], [1, 2]]);
    s.append([[1, 3]]);
    assert.deepEqual(s.drawn(), { xs: [0, 1], ys: [1, 3] });
  });

  it("rewinds when the steps go back (a restart from a checkpoint)", () => {
    const s = new Series();
    s.append(ramp(10));
    s.append([[5, 42], [6, 43]]);
    assert.deepEqual(s.drawn().xs, [0, 1, 2, 3, 4, 5, 6]);
    assert.equal(s.lastValue, 43);
  });

  it("replace() takes a snapshot in any order, and non-finite values become gaps", () => {
    const s = new Series();
    s.append(ramp(100));
    s.replace([[3, 1], [1, Number.NaN], [2, 2]]);
    assert.deepEqual(s.drawn(), { xs: [1, 2, 3], ys: [null, 2, 1] });
  });

  it("recomputes the drawn points only after a change", () => {
    const s = new Series();
    s.append(ramp(10));
    const first = s.drawn();
    assert.equal(s.drawn(), first);
    s.append([[10, 0]]);
    assert.notEqual(s.drawn(), first);
  });
});
