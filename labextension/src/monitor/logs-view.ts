/** Logs: a merged tab and one tab per rank, filter box, follow toggle, paging of older lines. */

import { h, setAttr, setText, show } from "./dom";
import type { LogLine, LogStore, Tab } from "./logs";
import type { OutMsg } from "./protocol";
import { SearchView, type Searcher } from "./search";

/** What the user chose in the log section (kept across re-created views of the same run). */
export interface LogPrefs {
  tab: Tab;
  filter: string;
  following: boolean;
}

interface Rendered {
  line: LogLine;
  nodes: Node[];
}

export class LogsView {
  readonly el: HTMLElement;
  private readonly tabs = h("div", { class: "nbtrain-logtabs", role: "tablist" });
  private readonly filter = h("input", {
    type: "search",
    class: "nbtrain-log-filter",
    placeholder: "Filter lines",
    "aria-label": "Filter log lines",
    "data-testid": "nbtrain-log-filter",
  });
  private readonly follow = h(
    "button",
    { type: "button", class: "nbtrain-button nbtrain-toggle", "aria-pressed": "true", "data-testid": "nbtrain-log-follow", title: "Keep the newest lines in view" },
    "Follow",
  );
  private readonly older = h(
    "button",
    { type: "button", class: "nbtrain-button", "data-testid": "nbtrain-log-older" },
    "Load older",
  );
  private readonly searchButton = h(
    "button",
    {
      type: "button",
      class: "nbtrain-button",
      "data-testid": "nbtrain-log-search-go",
      title: "Search the tab's whole log on disk (the filter matches only the lines held here)",
    },
    "Search whole log",
  );
  private readonly info = h("span", { class: "nbtrain-muted nbtrain-log-info" });
  /** "1,000 older lines loaded above", for a few seconds after a page of older lines came in. */
  private readonly note = h("span", { class: "nbtrain-log-note", "data-testid": "nbtrain-log-note" });
  private noteUntil = 0;
  private firstSeen: { tab: Tab; index: number | null } = { tab: "merged", index: null };
  private readonly results: SearchView;
  private readonly log = h("div", { class: "nbtrain-log", role: "log", tabindex: 0, "data-testid": "nbtrain-log" });
  private readonly tabButtons = new Map<Tab, HTMLButtonElement>();
  private tab: Tab = "merged";
  private following = true;
  private rendered: Rendered[] = [];
  private renderedKey = "";
  private renderedVersion = -1;
  private tabLayout = "";
  private totals: Record<string, number> = {};
  private autoScrolling = false;

  constructor(
    private readonly store: LogStore,
    private readonly send: (msg: OutMsg) => void,
    private readonly requestDraw: () => void,
    initial: LogPrefs | undefined,
    private readonly savePrefs: (prefs: LogPrefs) => void,
    search: Searcher,
  ) {
    this.results = new SearchView(search);
    // an older page grows a followed tab's window instead of cutting it off from the newest lines
    store.follows = (rank) => this.following && this.tab === rank;
    if (initial) {
      this.tab = initial.tab;
      this.filter.value = initial.filter;
      this.following = initial.following;
      setAttr(this.follow, "aria-pressed", String(initial.following));
    }
    this.el = h(
      "section",
      { class: "nbtrain-section nbtrain-logs" },
      h("div", { class: "nbtrain-section-title" }, "Logs"),
      this.tabs,
      h("div", { class: "nbtrain-log-toolbar" }, this.filter, this.searchButton, this.follow, this.older, this.info, this.note),
      this.results.el,
      this.log,
    );
    this.filter.addEventListener("input", () => {
      this.save();
      this.requestDraw();
    });
    this.filter.addEventListener("keydown", (event) => {
      if (event.key === "Enter") void this.results.start(this.filter.value, this.tab);
    });
    this.searchButton.addEventListener("click", () => void this.results.start(this.filter.value, this.tab));
    this.follow.addEventListener("click", () => this.setFollowing(!this.following));
    this.older.addEventListener("click", () => {
      if (this.tab === "merged") return;
      // Follow stays as the user set it; the lines in view stay in place (render keeps them there)
      const msg = this.store.requestOlder(this.tab, this.total(this.tab));
      if (msg) this.send(msg);
      this.requestDraw();
    });
    this.log.addEventListener("scroll", () => {
      if (this.autoScrolling) {
        this.autoScrolling = false;
        return;
      }
      const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 4;
      if (this.following && !atBottom) this.setFollowing(false);
    });
  }

  /** Show a tab (e.g. the failing rank's, from the triage panel). */
  select(tab: Tab): void {
    this.tab = tab;
    this.save();
    this.requestDraw();
  }

  private save(): void {
    this.savePrefs({ tab: this.tab, filter: this.filter.value, following: this.following });
  }

  render(logRanks: readonly number[], totals: Record<string, number>, failedRank: number | null): void {
    this.totals = totals;
    this.renderTabs(logRanks, failedRank);
    const tab = this.tab;
    const filter = this.filter.value;
    const key = `${String(tab)}\u0000${filter}`;
    const rankLog = tab === "merged" ? null : this.store.rank(tab);
    const total = tab === "merged" ? Object.values(totals).reduce((a, b) => a + b, 0) : this.total(tab);

    if (key !== this.renderedKey || this.store.version !== this.renderedVersion) {
      this.renderLines(this.store.visible(tab, filter), key !== this.renderedKey, tab === "merged", filter.trim() !== "");
      this.renderedKey = key;
      this.renderedVersion = this.store.version;
    }

    show(this.older, tab !== "merged");
    if (tab !== "merged") {
      const loading = this.store.isLoading(tab);
      this.older.disabled = loading || !this.store.hasOlder(tab, total);
      setText(this.older, loading ? "Loading…" : "Load older");
    }
    this.searchButton.disabled = filter.trim() === "";
    this.noteOlder(tab, rankLog?.firstIndex ?? null);
    const held = tab === "merged" ? this.store.merged.length : (rankLog?.lines.length ?? 0);
    const shown = this.rendered.length;
    let info = `${shown.toLocaleString()} line${shown === 1 ? "" : "s"}`;
    if (filter.trim()) info += ` match of ${held.toLocaleString()} held`;
    else if (total > held) info += ` of ${total.toLocaleString()} (older on disk)`;
    if (rankLog?.detached) info += " · older lines shown; Follow returns to the newest";
    setText(this.info, info);
    setAttr(this.log, "data-lines", shown);
    setAttr(this.log, "data-tab", String(tab));
    if (this.following) this.scrollToEnd();
  }

  /** Say (for 4 s) how many older lines a page put above the view: they arrive out of sight. */
  private noteOlder(tab: Tab, first: number | null): void {
    const before = this.firstSeen;
    this.firstSeen = { tab, index: first };
    if (before.tab === tab && before.index !== null && first !== null && first < before.index) {
      const n = before.index - first;
      setText(this.note, `↑ ${n.toLocaleString()} older line${n === 1 ? "" : "s"} loaded above`);
      this.noteUntil = Date.now() + 4000;
      window.setTimeout(() => this.requestDraw(), 4100);
    }
    show(this.note, Date.now() < this.noteUntil);
  }

  private total(rank: number): number {
    return this.totals[String(rank)] ?? 0;
  }

  private setFollowing(on: boolean): void {
    this.following = on;
    this.save();
    setAttr(this.follow, "aria-pressed", String(on));
    if (on && this.tab !== "merged") {
      const msg = this.store.reattach(this.tab, this.total(this.tab));
      if (msg) this.send(msg);
    }
    this.requestDraw();
  }

  private scrollToEnd(): void {
    const target = this.log.scrollHeight - this.log.clientHeight;
    if (Math.abs(this.log.scrollTop - target) > 1) {
      this.autoScrolling = true;
      this.log.scrollTop = target;
    }
  }

  private renderTabs(logRanks: readonly number[], failedRank: number | null): void {
    const layout = logRanks.join(",");
    if (layout !== this.tabLayout) {
      this.tabLayout = layout;
      const tabs: Tab[] = ["merged", ...logRanks];
      this.tabButtons.clear();
      this.tabs.replaceChildren(
        ...tabs.map((tab) => {
          const button = h(
            "button",
            { type: "button", role: "tab", class: "nbtrain-logtab", "data-testid": `nbtrain-logtab-${String(tab)}` },
            tab === "merged" ? "all ranks" : `rank ${tab}`,
          );
          button.addEventListener("click", () => this.select(tab));
          this.tabButtons.set(tab, button);
          return button;
        }),
      );
    }
    for (const [tab, button] of this.tabButtons) {
      setAttr(button, "aria-selected", String(tab === this.tab));
      setAttr(button, "data-failed", tab === failedRank ? "1" : null);
    }
  }

  /**
   * Update the visible lines. Live logs mostly grow at the end and drop from the front; that case
   * touches only the changed nodes. Anything else (other tab, filter, a page of older lines) redraws.
   */
  private renderLines(lines: LogLine[], reset: boolean, merged: boolean, filtered: boolean): void {
    const prev = this.rendered;
    const k = !reset && lines.length && prev.length ? prev.findIndex((r) => r.line === lines[0]) : -1;
    let incremental = k >= 0 && prev.length - k <= lines.length;
    for (let j = k; incremental && j < prev.length; j++) incremental = prev[j]?.line === lines[j - k];
    if (!incremental) {
      // keep the line at the top of the view in place (e.g. after a page of older lines came in)
      const anchor = reset || this.following ? null : this.topVisible();
      this.rebuild(lines, merged, filtered);
      if (anchor) this.restore(anchor);
      return;
    }
    for (const gone of prev.slice(0, k)) for (const node of gone.nodes) (node as ChildNode).remove();
    this.rendered = prev.slice(k);
    const last = this.rendered[this.rendered.length - 1]?.line ?? null;
    this.append(lines.slice(this.rendered.length), merged, last);
  }

  private rebuild(lines: readonly LogLine[], merged: boolean, filtered: boolean): void {
    this.rendered = [];
    this.log.replaceChildren();
    if (lines.length === 0) {
      const text = filtered ? "No line matches the filter." : "No output yet.";
      this.log.append(h("div", { class: "nbtrain-log-empty" }, text));
    }
    this.append(lines, merged, null);
  }

  /** The first line visible in the log box, and how far below the top edge it sits. */
  private topVisible(): { line: LogLine; offset: number } | null {
    const top = this.log.scrollTop;
    for (const { line, nodes } of this.rendered) {
      const el = nodes[nodes.length - 1] as HTMLElement;
      if (el.offsetTop + el.offsetHeight > top) return { line, offset: el.offsetTop - top };
    }
    return null;
  }

  private restore(anchor: { line: LogLine; offset: number }): void {
    const found = this.rendered.find((r) => r.line === anchor.line);
    if (!found) return;
    const el = found.nodes[found.nodes.length - 1] as HTMLElement;
    this.autoScrolling = true;
    this.log.scrollTop = el.offsetTop - anchor.offset;
  }

  private append(lines: readonly LogLine[], merged: boolean, before: LogLine | null): void {
    const fragment = document.createDocumentFragment();
    let previous = before;
    for (const line of lines) {
      const nodes: Node[] = [];
      const gap = !merged && previous !== null ? line.index - previous.index - 1 : 0;
      if (gap > 0) nodes.push(this.gapNode(line, gap));
      const el = h("div", { class: "nbtrain-line" });
      if (merged) el.append(h("span", { class: "nbtrain-line-rank" }, `[${line.rank}] `));
      el.append(line.text);
      nodes.push(el);
      for (const node of nodes) fragment.append(node);
      this.rendered.push({ line, nodes });
      previous = line;
    }
    this.log.append(fragment);
  }

  private gapNode(next: LogLine, gap: number): HTMLElement {
    const el = h(
      "button",
      { type: "button", class: "nbtrain-gap", title: "Load these lines from the log on disk" },
      `··· ${gap.toLocaleString()} line${gap === 1 ? "" : "s"} not shown ···`,
    );
    el.addEventListener("click", () => {
      const msg = this.store.requestPage(next.rank, next.index, Math.min(gap, 1000));
      if (msg) this.send(msg);
      this.requestDraw();
    });
    return el;
  }
}
