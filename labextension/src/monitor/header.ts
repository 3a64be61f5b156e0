/** Header: run identity, state with elapsed time, progress, notices, and the Stop / Resume / MLflow buttons. */

import { h, setAttr, setText, show } from "./dom";
import {
  NO_MLFLOW_PAGE,
  elapsedSeconds,
  formatDuration,
  formatStep,
  launchText,
  launchTitle,
  recycledText,
  resumeTitle,
  stateLabel,
} from "./format";
import { TERMINAL_STATES, type Header, type OutMsg } from "./protocol";

const STOP_ACK_TIMEOUT_MS = 10_000;

export class HeaderView {
  readonly el: HTMLElement;
  private readonly state = h("span", { class: "nbtrain-badge", "data-testid": "nbtrain-state" });
  private readonly title = h("span", { class: "nbtrain-title" });
  private readonly runId = h("span", { class: "nbtrain-muted nbtrain-runid" });
  private readonly shape = h("span", { class: "nbtrain-muted" });
  private readonly launch = h("span", { class: "nbtrain-muted", "data-testid": "nbtrain-launch" });
  private readonly elapsed = h("span", { class: "nbtrain-muted", "data-testid": "nbtrain-elapsed" });
  private readonly step = h("span", { class: "nbtrain-step", "data-testid": "nbtrain-step" });
  private readonly bar = h("div", { class: "nbtrain-progress-fill" });
  private readonly progress = h(
    "div",
    { class: "nbtrain-progress", role: "progressbar", "aria-valuemin": 0, "data-testid": "nbtrain-progress" },
    this.bar,
  );
  private readonly stop = h(
    "button",
    { type: "button", class: "nbtrain-button nbtrain-danger", "data-testid": "nbtrain-stop", title: "End every process of the run (asks first)" },
    "Stop",
  );
  /** Stop asks first, as the runs panel's Cancel does: "Stop the run?" with Stop run / Keep running. */
  private readonly confirmStop = h(
    "button",
    { type: "button", class: "nbtrain-button nbtrain-danger-filled", "data-testid": "nbtrain-stop-confirm" },
    "Stop run",
  );
  private readonly keepRunning = h("button", { type: "button", class: "nbtrain-button", "data-testid": "nbtrain-stop-keep" }, "Keep running");
  private readonly confirm = h(
    "span",
    { class: "nbtrain-confirm", role: "alertdialog", "aria-label": "Stop the run?", "data-testid": "nbtrain-stop-ask", hidden: true },
    h("span", { class: "nbtrain-confirm-text" }, "Stop the run? Every process of its gang is ended; a checkpointed run can be resumed."),
    this.keepRunning,
    this.confirmStop,
  );
  private readonly resume = h("button", { type: "button", class: "nbtrain-button", "data-testid": "nbtrain-resume" }, "Resume");
  private readonly mlflow = h(
    "a",
    { class: "nbtrain-button", target: "_blank", rel: "noopener noreferrer", "data-testid": "nbtrain-mlflow" },
    "Open in MLflow",
  );
  /** Shown instead of the link when the run has no MLflow page: disabled, its tooltip says why. */
  private readonly mlflowOff = h(
    "button",
    { type: "button", class: "nbtrain-button", disabled: true, "data-testid": "nbtrain-mlflow-off", title: NO_MLFLOW_PAGE },
    "MLflow",
  );
  private readonly notices = h("ul", { class: "nbtrain-notices" });
  private readonly detail = h("div", { class: "nbtrain-header-row nbtrain-detail", "data-testid": "nbtrain-detail" });
  /** When Stop was pressed here (browser clock, ms); the button waits for `header.stopping` a while. */
  private stopSentAt: number | null = null;
  private asking = false;
  private lastNotices = "";

  constructor(send: (msg: OutMsg) => void) {
    this.stop.addEventListener("click", () => this.ask(true));
    this.keepRunning.addEventListener("click", () => this.ask(false));
    this.confirmStop.addEventListener("click", () => {
      this.ask(false);
      this.stopSentAt = Date.now();
      this.stop.disabled = true;
      setText(this.stop, "Stopping…");
      send({ type: "stop" });
    });
    this.resume.addEventListener("click", () => send({ type: "resume" }));
    this.el = h(
      "div",
      { class: "nbtrain-header" },
      h(
        "div",
        { class: "nbtrain-header-row" },
        this.state,
        this.title,
        this.runId,
        this.shape,
        this.launch,
        this.elapsed,
        h("span", { class: "nbtrain-spacer" }),
        h("span", { class: "nbtrain-buttons" }, this.mlflow, this.mlflowOff, this.resume, this.stop, this.confirm),
      ),
      h("div", { class: "nbtrain-header-row nbtrain-progress-row" }, this.step, this.progress),
      this.detail,
      this.notices,
    );
  }

  render(header: Header, clockOffset: number, browserNow: number): void {
    const terminal = TERMINAL_STATES.has(header.state);
    // if the kernel never acknowledges the stop (message lost), the button comes back after a while
    const pressed = this.stopSentAt !== null && Date.now() - this.stopSentAt < STOP_ACK_TIMEOUT_MS;
    const stopping = !terminal && (header.stopping || pressed);
    setText(this.state, stateLabel(header.state, stopping));
    setAttr(this.state, "data-state", stopping ? "stopping" : header.state);
    setText(this.title, header.name || "run");
    setText(this.runId, header.run_id);
    const device = header.device && header.device !== "unknown" ? ` · ${header.device}` : "";
    setText(
      this.shape,
      header.world_size
        ? `${header.backend} · ${header.nodes} × ${header.procs} = ${header.world_size} rank${header.world_size === 1 ? "" : "s"}${device}`
        : header.backend,
    );
    setText(this.launch, `· ${launchText(header.warm)}`);
    setAttr(this.launch, "data-warm", header.warm === null ? "cold" : "warm");
    const recycled = recycledText(header.warm);
    setAttr(this.launch, "data-recycled", header.warm?.recycled ?? "");
    setAttr(this.launch, "title", recycled || launchTitle(header.warm));
    const elapsed = elapsedSeconds(header, clockOffset, browserNow);
    setText(this.elapsed, elapsed === null ? "" : `${terminal ? "ran" : "running for"} ${formatDuration(elapsed)}`);

    setText(this.step, formatStep(header.step, header.total));
    const known = header.total !== null && header.total > 0;
    show(this.progress, known);
    if (known) {
      const total = header.total as number;
      const done = Math.min(total, Math.max(0, header.step ?? 0));
      this.bar.style.width = `${((100 * done) / total).toFixed(1)}%`;
      setAttr(this.progress, "aria-valuemax", total);
      setAttr(this.progress, "aria-valuenow", done);
    }

    if (terminal || stopping) this.asking = false;
    show(this.stop, !terminal && !this.asking);
    show(this.confirm, !terminal && this.asking);
    this.stop.disabled = stopping;
    setText(this.stop, stopping ? "Stopping…" : "Stop");
    if (terminal || header.stopping) this.stopSentAt = null;

    show(this.resume, terminal && header.state !== "succeeded");
    this.resume.disabled = !header.can_resume;
    setAttr(this.resume, "title", resumeTitle(header.can_resume));

    show(this.mlflow, Boolean(header.tracking_url));
    show(this.mlflowOff, !header.tracking_url);
    if (header.tracking_url) setAttr(this.mlflow, "href", header.tracking_url);

    const detail = terminal ? recycled : header.detail;
    setText(this.detail, detail);
    show(this.detail, detail !== "");

    const notices = header.notices.join("\n");
    if (notices !== this.lastNotices) {
      this.lastNotices = notices;
      this.notices.replaceChildren(...header.notices.map((text) => h("li", {}, text)));
    }
    show(this.notices, header.notices.length > 0);
  }

  /** Show (or take back) the "Stop the run?" question in place of the Stop button. */
  private ask(on: boolean): void {
    this.asking = on;
    show(this.stop, !on);
    show(this.confirm, on);
    if (on) this.keepRunning.focus();
  }
}
