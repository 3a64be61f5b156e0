/**
 * Log lines held in the browser (pure): one bounded window per rank, keyed by line index, plus the
 * merged view in arrival order. Older lines are paged in on demand (`page` messages); the full logs
 * stay on disk in the kernel's run store.
 */

import type { OutMsg } from "./protocol";
import { RingBuffer } from "./ring";

export const MAX_LINES_PER_TAB = 3000;
/** Older pages may grow a followed window up to this many times its cap before it lets go of the tail. */
export const PAGED_GROWTH = 4;
export const PAGE_LIMIT = 1000;
/** A page request with no reply after this long may be sent again. */
const PENDING_TIMEOUT_MS = 5000;

export interface LogLine {
  readonly rank: number;
  readonly index: number;
  readonly text: string;
}

export type Tab = number | "merged";

function lowerBound(lines: readonly LogLine[], index: number): number {
  let lo = 0;
  let hi = lines.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((lines[mid] as LogLine).index < index) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * One rank's window of lines, sorted by index (gaps allowed: lines the kernel skipped under load).
 * It holds `cap` lines, or more after older pages came in while the tab follows the newest lines (up to
 * `PAGED_GROWTH * cap`): live lines then push the oldest out and the window keeps its size. An older page
 * that does not fit (or comes while the tab does not follow) pushes the newest out instead: the window is
 * then `detached` from the tail and ignores live lines until `reattach`.
 */
export class RankLog {
  lines: LogLine[] = [];
  detached = false;
  /** How many lines live lines may leave in the window (`cap`, more after older pages). */
  private size: number;

  constructor(
    readonly rank: number,
    readonly cap = MAX_LINES_PER_TAB,
  ) {
    this.size = cap;
  }

  get firstIndex(): number | null {
    return this.lines.length ? (this.lines[0] as LogLine).index : null;
  }

  get lastIndex(): number | null {
    return this.lines.length ? (this.lines[this.lines.length - 1] as LogLine).index : null;
  }

  /** A line from a batch; false when ignored (duplicate, or the window is detached). */
  addLive(index: number, text: string): boolean {
    if (this.detached) return false;
    if (!this.insert(index, text)) return false;
    if (this.lines.length > this.size) this.lines.splice(0, this.lines.length - this.size);
    return true;
  }

  /**
   * Lines `start ..` of a page reply; true when anything was added. `keepTail`: the tab follows the
   * newest lines, so an older page grows the window (up to `PAGED_GROWTH * cap`) rather than detach it.
   */
  addPage(start: number, texts: readonly string[], keepTail = false): boolean {
    let added = false;
    for (let i = 0; i < texts.length; i++) added = this.insert(start + i, texts[i] as string) || added;
    const older = start + texts.length - 1 < (this.lastIndex ?? 0);
    if (older && keepTail && this.lines.length <= PAGED_GROWTH * this.cap) {
      this.size = Math.max(this.size, this.lines.length);
      return added;
    }
    const excess = this.lines.length - this.size;
    if (excess > 0) {
      if (older) {
        // an older page: keep it, let go of the newest lines
        this.lines.length = this.size;
        this.detached = true;
      } else {
        this.lines.splice(0, excess);
      }
    }
    return added;
  }

  /** Replace the window (a snapshot). */
  replace(entries: readonly (readonly [number, string])[]): void {
    this.lines = [];
    this.detached = false;
    this.size = this.cap;
    for (const [index, text] of entries) this.insert(index, text);
    if (this.lines.length > this.cap) this.lines.splice(0, this.lines.length - this.cap);
  }

  /** Drop the window and follow live lines again (the caller asks for the tail page). */
  reattach(): void {
    this.lines = [];
    this.detached = false;
    this.size = this.cap;
  }

  private insert(index: number, text: string): boolean {
    const last = this.lastIndex;
    if (last === null || index > last) {
      this.lines.push({ rank: this.rank, index, text });
      return true;
    }
    const at = lowerBound(this.lines, index);
    if (this.lines[at]?.index === index) return false;
    this.lines.splice(at, 0, { rank: this.rank, index, text });
    return true;
  }
}

/** The merged view: every rank's lines in arrival order, at most `cap`, each (rank, index) once. */
export class MergedLog {
  private ring: RingBuffer<LogLine>;
  private lastIndex = new Map<number, number>();

  constructor(cap = MAX_LINES_PER_TAB) {
    this.ring = new RingBuffer<LogLine>(cap);
  }

  get length(): number {
    return this.ring.length;
  }

  add(rank: number, index: number, text: string): boolean {
    const last = this.lastIndex.get(rank);
    if (last !== undefined && index <= last) return false;
    this.lastIndex.set(rank, index);
    this.ring.push({ rank, index, text });
    return true;
  }

  replace(entries: readonly (readonly [number, number, string])[]): void {
    this.ring.clear();
    this.lastIndex.clear();
    for (const [rank, index, text] of entries) this.add(rank, index, text);
  }

  toArray(): LogLine[] {
    return this.ring.toArray();
  }
}

/** All log windows of one monitor view, with the page requests in flight. */
export class LogStore {
  readonly merged: MergedLog;
  private readonly ranks = new Map<number, RankLog>();
  private readonly pending = new Map<number, number>(); // rank -> time the page was asked for
  /** Bumped on every change, so views redraw only when something moved. */
  version = 0;
  /** Whether a rank's tab follows its newest lines (the view says): older pages then grow its window. */
  follows: (rank: number) => boolean = () => false;

  constructor(
    readonly cap = MAX_LINES_PER_TAB,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.merged = new MergedLog(cap);
  }

  rank(rank: number): RankLog {
    let log = this.ranks.get(rank);
    if (!log) {
      log = new RankLog(rank, this.cap);
      this.ranks.set(rank, log);
    }
    return log;
  }

  /** `[rank, index, text]` lines of a batch. */
  applyBatch(lines: readonly (readonly [number, number, string])[]): void {
    let changed = false;
    for (const [rank, index, text] of lines) {
      changed = this.rank(rank).addLive(index, text) || changed;
      changed = this.merged.add(rank, index, text) || changed;
    }
    if (changed) this.version++;
  }

  applySnapshot(
    lines: Readonly<Record<string, readonly (readonly [number, string])[]>>,
    merged: readonly (readonly [number, number, string])[],
  ): void {
    for (const [key, entries] of Object.entries(lines)) this.rank(Number(key)).replace(entries);
    this.merged.replace(merged);
    this.pending.clear();
    this.version++;
  }

  applyPage(rank: number, start: number, texts: readonly string[]): void {
    this.pending.delete(rank);
    this.rank(rank).addPage(start, texts, this.follows(rank));
    this.version++; // also when nothing was added: the "loading" state ended
  }

  isLoading(rank: number): boolean {
    const since = this.pending.get(rank);
    return since !== undefined && this.now() - since < PENDING_TIMEOUT_MS;
  }

  /** Whether lines older than the window exist on disk (`total` = the rank's line count so far). */
  hasOlder(rank: number, total: number): boolean {
    const first = this.rank(rank).firstIndex;
    return first === null ? total > 0 : first > 0;
  }

  /** The `page` message that loads older lines of `rank`, or null (nothing older, or one in flight). */
  requestOlder(rank: number, total: number): OutMsg | null {
    if (!this.hasOlder(rank, total)) return null;
    return this.requestPage(rank, this.rank(rank).firstIndex ?? total, PAGE_LIMIT);
  }

  /** The `page` message for up to `limit` lines before index `before`, or null while one is in flight. */
  requestPage(rank: number, before: number, limit: number): OutMsg | null {
    if (this.isLoading(rank) || before <= 0) return null;
    this.pending.set(rank, this.now());
    this.version++;
    return { type: "page", rank, before, limit: Math.max(1, Math.min(limit, PAGE_LIMIT)) };
  }

  /** Follow the tail of a detached rank again: returns the `page` message for its newest lines. */
  reattach(rank: number, total: number): OutMsg | null {
    const log = this.rank(rank);
    if (!log.detached) return null;
    log.reattach();
    this.pending.set(rank, this.now());
    this.version++;
    return { type: "page", rank, before: total, limit: PAGE_LIMIT };
  }

  /** The lines a tab shows, filtered by a case-insensitive substring (the merged view matches `[r] text`). */
  visible(tab: Tab, filter: string): LogLine[] {
    const lines = tab === "merged" ? this.merged.toArray() : this.rank(tab).lines;
    const needle = filter.trim().toLowerCase();
    if (!needle) return tab === "merged" ? lines : lines.slice();
    return lines.filter((line) =>
      (tab === "merged" ? `[${line.rank}] ${line.text}` : line.text).toLowerCase().includes(needle),
    );
  }
}
