/** Rank grid: one cell per global rank, grouped by node; nodes collapse (big gangs start collapsed). */

import { h, setAttr, setText, show } from "./dom";
import type { Ranks } from "./protocol";
import { describeRank, isDetailed, startsCollapsed, summarizeNode } from "./rankview";

interface CellEls {
  el: HTMLElement;
  step: HTMLElement;
  age: HTMLElement;
}

interface NodeEls {
  el: HTMLElement;
  toggle: HTMLButtonElement;
  grid: HTMLElement;
  cells: Map<number, CellEls>;
  layout: string; // the rank list the grid was built for
}

export class RanksView {
  readonly el: HTMLElement;
  private readonly summary = h("span", { class: "nbtrain-muted" });
  private readonly body = h("div", { class: "nbtrain-nodes" });
  private readonly nodes = new Map<number, NodeEls>();
  private readonly collapsed = new Map<number, boolean>(); // the user's choice per node
  private detailed = true;

  constructor(private readonly requestDraw: () => void) {
    this.el = h(
      "section",
      { class: "nbtrain-section nbtrain-ranks", "data-testid": "nbtrain-ranks" },
      h("div", { class: "nbtrain-section-title" }, h("span", {}, "Ranks"), this.summary),
      this.body,
    );
  }

  /** `extraAge`: seconds since the trait arrived (ages keep counting between syncs while live). */
  render(ranks: Ranks, worldSize: number, extraAge: number): void {
    const total = ranks.nodes.reduce((n, node) => n + node.ranks.length, 0);
    show(this.el, total > 0);
    if (total === 0) return;
    const size = Math.max(worldSize, total);
    const detailed = isDetailed(size);
    if (detailed !== this.detailed) {
      this.detailed = detailed;
      this.body.replaceChildren();
      this.nodes.clear();
    }
    setAttr(this.el, "data-density", detailed ? "detailed" : "compact");
    setText(this.summary, this.summaryText(ranks));

    const seen = new Set<number>();
    ranks.nodes.forEach((node, position) => {
      seen.add(node.node);
      const layout = node.ranks.map((tuple) => tuple[0]).join(",");
      let els = this.nodes.get(node.node);
      if (!els || els.layout !== layout) {
        els?.el.remove();
        els = this.buildNode(node.node, node.ranks.map((tuple) => tuple[0]), layout);
        this.nodes.set(node.node, els);
      }
      if (this.body.children[position] !== els.el) this.body.insertBefore(els.el, this.body.children[position] ?? null);

      const summary = summarizeNode(node);
      setText(els.toggle, summary.text);
      setAttr(els.toggle, "data-worst", summary.worst);
      // big gangs start collapsed, except nodes where a rank failed
      const isCollapsed = this.collapsed.get(node.node) ?? (startsCollapsed(size) && summary.worst !== "failed");
      setAttr(els.toggle, "aria-expanded", String(!isCollapsed));
      show(els.grid, !isCollapsed);
      if (isCollapsed) return;
      for (const tuple of node.ranks) {
        const cell = els.cells.get(tuple[0]);
        if (!cell) continue;
        const view = describeRank(tuple, ranks.median_step, extraAge);
        setAttr(cell.el, "data-state", view.state);
        setAttr(cell.el, "data-straggler", view.straggler ? "1" : "0");
        setAttr(cell.el, "title", view.title);
        setText(cell.step, view.step);
        setText(cell.age, view.age ? `seen ${view.age} ago` : "");
      }
    });
    for (const [id, els] of this.nodes) {
      if (!seen.has(id)) {
        els.el.remove();
        this.nodes.delete(id);
      }
    }
  }

  private summaryText(ranks: Ranks): string {
    const parts = Object.entries(ranks.counts)
      .filter(([, n]) => n > 0)
      .map(([state, n]) => `${n} ${state === "straggler" && n !== 1 ? "stragglers" : state}`);
    if (ranks.median_step !== null) parts.push(`median step ${ranks.median_step}`);
    return parts.join(" · ");
  }

  private buildNode(node: number, ranks: number[], layout: string): NodeEls {
    const toggle = h("button", { type: "button", class: "nbtrain-node-toggle", "aria-expanded": "true" });
    const grid = h("div", { class: "nbtrain-rank-grid" });
    const cells = new Map<number, CellEls>();
    for (const rank of ranks) {
      const step = h("span", { class: "nbtrain-cell-step" });
      const age = h("span", { class: "nbtrain-cell-age", title: "when this rank was last heard from (a line, a metric or a heartbeat)" });
      const el = this.detailed
        ? h("div", { class: "nbtrain-cell", "data-testid": `nbtrain-rank-${rank}` }, h("span", { class: "nbtrain-cell-rank" }, `rank ${rank}`), step, age)
        : h("div", { class: "nbtrain-cell", "data-testid": `nbtrain-rank-${rank}` });
      cells.set(rank, { el, step, age });
      grid.append(el);
    }
    toggle.addEventListener("click", () => {
      const now = toggle.getAttribute("aria-expanded") === "true";
      this.collapsed.set(node, now);
      setAttr(toggle, "aria-expanded", String(!now));
      show(grid, !now);
      this.requestDraw();
    });
    const el = h("div", { class: "nbtrain-node" }, toggle, grid);
    return { el, toggle, grid, cells, layout };
  }
}
