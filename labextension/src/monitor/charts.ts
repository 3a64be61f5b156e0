/**
 * Metric charts: one uPlot per metric key (x = step, labelled axes), streaming, decimated, with hover values.
 * A metric with a single point so far (a final test accuracy) is shown as its value, not as a chart.
 */

import uPlot from "uplot";

import { cssVar, h, setAttr, setText } from "./dom";
import { formatTick, formatValue } from "./format";
import type { Series, XY } from "./series";

const HEIGHT = 190;

class Chart {
  readonly el: HTMLElement;
  private readonly latest = h("span", { class: "nbtrain-muted nbtrain-chart-latest" });
  private readonly body = h("div", { class: "nbtrain-chart-body" });
  private plot: uPlot | null = null;
  private drawn: XY | null = null;
  private width = 0;
  private zoomed = false;

  constructor(readonly key: string) {
    this.el = h(
      "div",
      { class: "nbtrain-chart", "data-testid": `nbtrain-chart-${key}`, "data-points": 0 },
      h("div", { class: "nbtrain-chart-title" }, h("span", { class: "nbtrain-chart-key" }, key), this.latest),
      this.body,
    );
  }

  update(series: Series): void {
    setAttr(this.el, "data-points", series.length);
    const step = series.lastStep;
    setText(this.latest, step === null ? "" : `${formatValue(series.lastValue)} at step ${step}`);
    const width = Math.floor(this.body.clientWidth);
    if (!this.el.isConnected || width <= 0) return; // drawn once it is on the page (sized, themed)
    const data = series.drawn();
    setAttr(this.el, "data-drawn", data.xs.length);
    if (!this.plot) {
      this.plot = this.create(width, data);
      this.drawn = data;
      this.width = width;
      return;
    }
    if (width !== this.width) {
      this.width = width;
      this.plot.setSize({ width, height: HEIGHT });
    }
    if (data !== this.drawn) {
      this.drawn = data;
      this.plot.setData([data.xs, data.ys], !this.zoomed);
    }
  }

  destroy(): void {
    this.plot?.destroy();
    this.plot = null;
  }

  private create(width: number, data: XY): uPlot {
    const text = cssVar(this.el, "--jp-ui-font-color2", "#616161");
    const grid = cssVar(this.el, "--jp-border-color2", "#e0e0e0");
    const line = cssVar(this.el, "--jp-brand-color1", "#1976d2");
    const font = `11px ${cssVar(this.el, "--jp-ui-font-family", "sans-serif")}`;
    const axis: uPlot.Axis = { stroke: text, font, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const plot = new uPlot(
      {
        width,
        height: HEIGHT,
        scales: { x: { time: false } },
        cursor: { drag: { x: true, y: false } },
        legend: { live: true },
        series: [
          { label: "step", value: (_u, v) => formatValue(v) },
          { label: this.key, stroke: line, width: 1.5, spanGaps: false, value: (_u, v) => formatValue(v) },
        ],
        axes: [
          { ...axis, label: "step", labelSize: 16, labelFont: font },
          {
            ...axis,
            label: this.key,
            labelSize: 16,
            labelFont: font,
            values: (_u, ticks) => ticks.map((v) => formatTick(v)),
            // wide enough for the longest tick label (uPlot's default assumes short numbers)
            // (uPlot passes null before the first ticks exist, whatever its types say)
            size: (_u, values) => 14 + 7 * Math.max(2, ...((values as string[] | null) ?? []).map((v) => v.length)),
          },
        ],
        hooks: {
          // a drag-selection zooms in: keep that view while points stream in; double-click resets it
          setSelect: [(u) => void (this.zoomed = this.zoomed || u.select.width > 0)],
        },
      },
      [data.xs, data.ys],
      this.body,
    );
    plot.over.addEventListener("dblclick", () => {
      this.zoomed = false;
    });
    return plot;
  }
}

/** One metric shown as its value: `test_accuracy 0.9722 at step 72`. */
class Value {
  readonly el: HTMLElement;
  private readonly number = h("span", { class: "nbtrain-value-number" });
  private readonly where = h("span", { class: "nbtrain-muted" });

  constructor(readonly key: string) {
    this.el = h(
      "div",
      { class: "nbtrain-value", "data-testid": `nbtrain-value-${key}`, "data-points": 0 },
      h("span", { class: "nbtrain-value-key" }, key),
      this.number,
      this.where,
    );
  }

  update(series: Series): void {
    setAttr(this.el, "data-points", series.length);
    setText(this.number, formatValue(series.lastValue));
    setText(this.where, series.lastStep === null ? "" : `at step ${series.lastStep}`);
  }
}

export class ChartsView {
  readonly el: HTMLElement;
  private readonly values = h("div", { class: "nbtrain-values", "data-testid": "nbtrain-values" });
  private readonly grid = h("div", { class: "nbtrain-chart-grid" });
  private readonly charts = new Map<string, Chart>();
  private readonly cards = new Map<string, Value>();
  private readonly resize: ResizeObserver | null;

  constructor(requestDraw: () => void) {
    this.el = h("section", { class: "nbtrain-section nbtrain-charts" }, h("div", { class: "nbtrain-section-title" }, "Metrics"), this.values, this.grid);
    // each chart's card is observed: its width changes when the grid's columns do, even where the grid's own size
    // does not (a chart joining or leaving the row)
    this.resize = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(() => requestDraw());
    this.resize?.observe(this.grid);
  }

  render(keys: readonly string[], series: ReadonlyMap<string, Series>): void {
    this.el.hidden = keys.length === 0;
    // a key with fewer than two points is a value; it becomes a chart with its second point
    const single = (key: string): boolean => (series.get(key)?.length ?? 0) < 2;
    const valueKeys = keys.filter(single);
    const chartKeys = keys.filter((key) => !single(key));
    this.values.hidden = valueKeys.length === 0;
    valueKeys.forEach((key, position) => {
      let card = this.cards.get(key);
      if (!card) {
        card = new Value(key);
        this.cards.set(key, card);
      }
      if (this.values.children[position] !== card.el) this.values.insertBefore(card.el, this.values.children[position] ?? null);
      const data = series.get(key);
      if (data) card.update(data);
    });
    for (const [key, card] of this.cards) {
      if (!valueKeys.includes(key)) {
        card.el.remove();
        this.cards.delete(key);
      }
    }
    // every chart is in its place before any is measured: a chart sized while it was alone in the grid (full
    // width) would keep that width once a second chart shares the row
    const shown = chartKeys.map((key, position) => {
      let chart = this.charts.get(key);
      if (!chart) {
        chart = new Chart(key);
        this.charts.set(key, chart);
        this.resize?.observe(chart.el);
      }
      if (this.grid.children[position] !== chart.el) this.grid.insertBefore(chart.el, this.grid.children[position] ?? null);
      return chart;
    });
    for (const [key, chart] of this.charts) {
      if (!chartKeys.includes(key)) {
        this.resize?.unobserve(chart.el);
        chart.destroy();
        chart.el.remove();
        this.charts.delete(key);
      }
    }
    for (const chart of shown) {
      const data = series.get(chart.key);
      if (data) chart.update(data);
    }
  }

  dispose(): void {
    this.resize?.disconnect();
    for (const chart of this.charts.values()) chart.destroy();
    this.charts.clear();
  }
}
