/**
 * One monitor view: wires the model (traits + custom messages) to the sections and redraws them
 * at most 10 times per second.
 */

import { ChartsView } from "./charts";
import { h, setAttr } from "./dom";
import { EnvView } from "./env";
import { FailureView } from "./failure";
import { HeaderView } from "./header";
import { LogStore } from "./logs";
import { LogsView, type LogPrefs } from "./logs-view";
import {
  TERMINAL_STATES,
  TRAIT_NAMES,
  asInMsg,
  readTraits,
  type BatchMsg,
  type InMsg,
  type OutMsg,
  type SnapshotMsg,
  type Traits,
  type WidgetModel,
} from "./protocol";
import { RanksView } from "./ranks";
import { FrameScheduler } from "./schedule";
import { restSearcher } from "./search";
import { Series } from "./series";

/** A missed batch triggers a fresh snapshot, but not more often than this. */
const RESYNC_MIN_INTERVAL_MS = 2000;
/** `hello` is repeated until a snapshot answers it: 2, 4, 8, 16, then every 30 s. */
const HELLO_RETRY_FIRST_MS = 2000;
const HELLO_RETRY_MAX_MS = 30_000;

/**
 * The log tab, filter and follow choice of each run's monitor, so that a view JupyterLab re-creates
 * (cells moved, notebook windowing, a second display) opens where the user left it.
 */
const rememberedPrefs = new Map<string, LogPrefs>();
const REMEMBERED_MAX = 64;

function remember(runId: string, prefs: LogPrefs): void {
  if (!runId) return;
  rememberedPrefs.delete(runId);
  rememberedPrefs.set(runId, prefs);
  const oldest = rememberedPrefs.keys().next().value;
  if (rememberedPrefs.size > REMEMBERED_MAX && oldest !== undefined) rememberedPrefs.delete(oldest);
}

export class Monitor {
  private traits: Traits;
  private readonly series = new Map<string, Series>();
  private readonly logs = new LogStore();
  private readonly scheduler: FrameScheduler;
  private readonly failure: FailureView;
  private readonly header: HeaderView;
  private readonly ranks: RanksView;
  private readonly charts: ChartsView;
  private readonly logsView: LogsView;
  private readonly env = new EnvView();
  private readonly root: HTMLElement;
  /** kernel clock - browser clock, from the last header */
  private clockOffset = 0;
  private ranksReceived = Date.now() / 1000;
  private lastSeq: number | null = null;
  private lastResync = -Infinity;
  private helloTimer: number | null = null;
  private helloTries = 0;
  private ticker: number | null = null;
  private readonly listeners: [string, (...args: unknown[]) => void][] = [];

  constructor(
    private readonly model: WidgetModel,
    el: HTMLElement,
  ) {
    const send = (msg: OutMsg): void => this.model.send(msg);
    const draw = (): void => this.scheduler.request();
    this.scheduler = new FrameScheduler(() => this.draw());
    this.header = new HeaderView(send);
    this.ranks = new RanksView(draw);
    this.charts = new ChartsView(draw);
    this.traits = readTraits(model);
    const runId = this.traits.header.run_id;
    this.logsView = new LogsView(this.logs, send, draw, rememberedPrefs.get(runId), (prefs) => remember(runId, prefs),
      restSearcher(runId));
    this.failure = new FailureView((rank) => this.logsView.select(rank));
    this.root = h(
      "div",
      { class: "nbtrain-monitor", "data-testid": "nbtrain-monitor" },
      this.failure.el,
      this.header.el,
      this.ranks.el,
      this.charts.el,
      this.logsView.el,
      this.env.el,
    );
    el.replaceChildren(this.root);

    this.onHeader();
    for (const name of TRAIT_NAMES) {
      this.listen(`change:${name}`, () => {
        this.traits = readTraits(this.model);
        if (name === "header") this.onHeader();
        if (name === "ranks") this.ranksReceived = Date.now() / 1000;
        this.scheduler.request();
      });
    }
    this.listen("msg:custom", (content) => this.onMessage(asInMsg(content)));
    this.sayHello();
    this.scheduler.request();
  }

  dispose(): void {
    for (const [event, callback] of this.listeners) this.model.off(event, callback);
    this.listeners.length = 0;
    this.scheduler.dispose();
    this.charts.dispose();
    if (this.helloTimer !== null) window.clearTimeout(this.helloTimer);
    this.setTicking(false);
    this.root.remove();
  }

  private listen(event: string, callback: (...args: unknown[]) => void): void {
    this.model.on(event, callback);
    this.listeners.push([event, callback]);
  }

  private onHeader(): void {
    const header = this.traits.header;
    if (header.now) this.clockOffset = header.now - Date.now() / 1000;
    // elapsed time and rank ages move on their own while the run is live
    this.setTicking(header.started !== null && !TERMINAL_STATES.has(header.state));
  }

  private setTicking(on: boolean): void {
    if (on && this.ticker === null) this.ticker = window.setInterval(() => this.scheduler.request(), 1000);
    if (!on && this.ticker !== null) {
      window.clearInterval(this.ticker);
      this.ticker = null;
    }
  }

  private onMessage(msg: InMsg | null): void {
    if (msg === null) return;
    if (msg.type === "batch") this.onBatch(msg);
    else if (msg.type === "snapshot") this.onSnapshot(msg);
    else this.logs.applyPage(msg.rank, msg.start, msg.lines);
    this.scheduler.request();
  }

  private onBatch(msg: BatchMsg): void {
    if (this.lastSeq !== null) {
      if (msg.seq <= this.lastSeq) return; // already in the snapshot (or a duplicate)
      if (msg.seq > this.lastSeq + 1) this.resync();
    }
    this.lastSeq = msg.seq;
    for (const [key, points] of Object.entries(msg.points ?? {})) this.seriesFor(key).append(points);
    this.logs.applyBatch(msg.lines ?? []);
  }

  /**
   * Ask for a snapshot, and again until one comes: a message can be lost on the way (iopub drops
   * above its rate limits; after a browser reload the kernel has been seen to refuse the first comm
   * messages of the new page).
   */
  private sayHello(): void {
    if (this.helloTimer !== null) window.clearTimeout(this.helloTimer);
    this.model.send({ type: "hello" });
    const wait = Math.min(HELLO_RETRY_MAX_MS, HELLO_RETRY_FIRST_MS * 2 ** this.helloTries);
    this.helloTries++;
    this.helloTimer = window.setTimeout(() => {
      this.helloTimer = null;
      this.sayHello();
    }, wait);
  }

  private onSnapshot(msg: SnapshotMsg): void {
    if (this.helloTimer !== null) window.clearTimeout(this.helloTimer);
    this.helloTimer = null;
    this.helloTries = 0;
    // batches sent before the snapshot arrived before it; lines and points it shares with the
    // next batch are deduplicated by line index and step, so the seq check restarts from there
    this.lastSeq = null;
    for (const [key, points] of Object.entries(msg.points ?? {})) this.seriesFor(key).replace(points);
    this.logs.applySnapshot(msg.lines ?? {}, msg.merged ?? []);
  }

  /** Batches were missed (e.g. iopub dropped messages): ask for a fresh snapshot. */
  private resync(): void {
    const now = performance.now();
    if (now - this.lastResync < RESYNC_MIN_INTERVAL_MS) return;
    this.lastResync = now;
    this.sayHello();
  }

  private seriesFor(key: string): Series {
    let series = this.series.get(key);
    if (!series) {
      series = new Series();
      this.series.set(key, series);
    }
    return series;
  }

  private draw(): void {
    const { header, ranks, failure, env, metric_keys, log_ranks, line_counts } = this.traits;
    const now = Date.now() / 1000;
    setAttr(this.root, "data-state", header.state);
    setAttr(this.root, "data-run-id", header.run_id || null);
    this.failure.render(failure);
    this.header.render(header, this.clockOffset, now);
    const live = !TERMINAL_STATES.has(header.state);
    this.ranks.render(ranks, header.world_size, live ? Math.max(0, now - this.ranksReceived) : 0);
    const keys = [...metric_keys, ...[...this.series.keys()].filter((key) => !metric_keys.includes(key))];
    for (const key of keys) this.seriesFor(key);
    this.charts.render(keys, this.series);
    // a tab for every rank of the gang, quiet ones too (their tab must not vanish when another rank prints)
    const tabs = new Set([...log_ranks, ...ranks.nodes.flatMap((node) => node.ranks.map((t) => t[0]))]);
    this.logsView.render([...tabs].sort((a, b) => a - b), line_counts, failure?.rank ?? null);
    this.env.render(env);
  }
}
