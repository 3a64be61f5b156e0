import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { LogStore, RankLog } from "../src/monitor/logs";

const texts = (n: number, from = 0): string[] => Array.from({ length: n }, (_, i) => `line ${from + i}`);

describe("RankLog", () => {
  it("holds at most `cap` live lines, dropping the oldest, and ignores duplicates", () => {
    const log = new RankLog(0, 5);
    for (let i = 0; i < 8; i++) log.addLive(i, `l${i}`);
    assert.equal(log.addLive(7, "dup"), false);
    assert.deepEqual(log.lines.map((l) => l.index), [3, 4, 5, 6, 7]);
  });

  it("pages older lines in front, and detaches from the tail when they push the newest out", () => {
    const log = new RankLog(0, 5);
    for (let i = 10; i < 13; i++) log.addLive(i, `l${i}`);
    log.addPage(7, texts(3, 7));
    assert.deepEqual(log.lines.map((l) => l.index), [7, 8, 9, 10, 11]);
    assert.equal(log.detached, true);
    assert.equal(log.addLive(13, "ignored while detached"), false);
    log.reattach();
    assert.equal(log.detached, false);
    assert.deepEqual(log.lines, []);
  });

  it("grows a followed window for older pages, keeps taking live lines, and keeps its size", () => {
    const log = new RankLog(0, 5);
    for (let i = 10; i < 15; i++) log.addLive(i, `l${i}`);
    log.addPage(5, texts(5, 5), true);
    assert.deepEqual(log.lines.map((l) => l.index), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
    assert.equal(log.detached, false);
    assert.equal(log.addLive(15, "live"), true);
    assert.equal(log.lines.length, 10);
    assert.equal(log.lastIndex, 15);
    // past PAGED_GROWTH x cap the newest lines go after all
    log.addPage(0, texts(5, 0), true);
    log.addPage(0, texts(0), true);
    const big = new RankLog(0, 2);
    for (let i = 20; i < 22; i++) big.addLive(i, `l${i}`);
    big.addPage(10, texts(10, 10), true);
    assert.equal(big.detached, true);
    assert.equal(big.lines.length, 2);
  });

  it("fills a gap left by lines the kernel skipped", () => {
    const log = new RankLog(0, 100);
    log.addLive(0, "a");
    log.addLive(5, "f");
    log.addPage(1, ["b", "c", "d", "e"]);
    assert.deepEqual(log.lines.map((l) => l.text), ["a", "b", "c", "d", "e", "f"]);
    assert.equal(log.detached, false);
  });
});

describe("LogStore", () => {
  it("fans batch lines out to the rank tabs and the merged view, each line once", () => {
    const store = new LogStore();
    store.applyBatch([[0, 0, "r0 a"], [1, 0, "r1 a"], [0, 1, "r0 b"]]);
    store.applyBatch([[0, 1, "r0 b"]]); // re-sent
    assert.deepEqual(store.visible(0, "").map((l) => l.text), ["r0 a", "r0 b"]);
    assert.deepEqual(store.visible(1, "").map((l) => l.text), ["r1 a"]);
    assert.deepEqual(store.visible("merged", "").map((l) => `${l.rank}:${l.text}`), ["0:r0 a", "1:r1 a", "0:r0 b"]);
  });

  it("bounds every tab to 3,000 lines by default", () => {
    const store = new LogStore();
    const lines: [number, number, string][] = [];
    for (let i = 0; i < 10_000; i++) lines.push([i % 2, Math.floor(i / 2), `x${i}`]);
    store.applyBatch(lines);
    assert.equal(store.visible("merged", "").length, 3000);
    assert.equal(store.visible(0, "").length, 3000);
    assert.equal(store.visible(0, "")[2999]?.index, 4999);
  });

  it("filters case-insensitively; the merged view also matches the [rank] prefix", () => {
    const store = new LogStore();
    store.applyBatch([[0, 0, "Epoch 1 loss 0.3"], [3, 0, "epoch 1 loss 0.4"], [3, 1, "saving"]]);
    assert.equal(store.visible("merged", "EPOCH").length, 2);
    assert.deepEqual(store.visible("merged", "[3]").map((l) => l.text), ["epoch 1 loss 0.4", "saving"]);
    assert.deepEqual(store.visible(3, "sav").map((l) => l.index), [1]);
  });

  it("asks for older lines before the first held one, once at a time", () => {
    let now = 0;
    const store = new LogStore(3000, () => now);
    store.applySnapshot({ "2": [[5000, "a"], [5001, "b"]] }, []);
    assert.equal(store.hasOlder(2, 5002), true);
    assert.deepEqual(store.requestOlder(2, 5002), { type: "page", rank: 2, before: 5000, limit: 1000 });
    assert.equal(store.requestOlder(2, 5002), null); // in flight
    assert.equal(store.isLoading(2), true);
    store.applyPage(2, 4000, texts(1000, 4000));
    assert.equal(store.isLoading(2), false);
    assert.equal(store.visible(2, "").length, 1002);
    assert.equal(store.visible(2, "")[0]?.index, 4000);
    // a reply that never comes does not block the button forever
    store.requestOlder(2, 5002);
    now += 6000;
    assert.notEqual(store.requestOlder(2, 5002), null);
  });

  it("has nothing older once index 0 is held; an empty tab pages from the line count", () => {
    const store = new LogStore();
    store.applyBatch([[0, 0, "first"]]);
    assert.equal(store.requestOlder(0, 1), null);
    assert.deepEqual(store.requestOlder(1, 250), { type: "page", rank: 1, before: 250, limit: 1000 });
  });

  it("follows the tail again after reattach (asks for the newest page)", () => {
    const store = new LogStore(5);
    store.applyBatch([[0, 100, "a"], [0, 101, "b"]]);
    store.applyPage(0, 90, texts(10, 90));
    assert.equal(store.rank(0).detached, true);
    assert.deepEqual(store.reattach(0, 120), { type: "page", rank: 0, before: 120, limit: 1000 });
    store.applyBatch([[0, 121, "live"]]);
    assert.deepEqual(store.visible(0, "").map((l) => l.text), ["live"]);
  });

  it("pages a gap in (lines the kernel skipped under load), bounded to a page", () => {
    const store = new LogStore();
    store.applyBatch([[3, 0, "a"], [3, 5000, "b"]]);
    assert.deepEqual(store.requestPage(3, 5000, 4999), { type: "page", rank: 3, before: 5000, limit: 1000 });
    store.applyPage(3, 4000, texts(1000, 4000));
    assert.equal(store.visible(3, "").length, 1002);
    assert.equal(store.requestPage(3, 0, 10), null); // nothing before line 0
  });

  it("bumps its version only when something changed", () => {
    const store = new LogStore();
    store.applyBatch([[0, 0, "a"]]);
    const v = store.version;
    store.applyBatch([[0, 0, "a"]]);
    assert.equal(store.version, v);
  });
});
