/**
 * The "Distributed runs" sidebar panel: every run with its state, backend, world size, start time and
 * duration, live from the RunsModel; per run the actions monitor, cancel, resume, copy attach code
 * and MLflow, each a `nbtrain:*` command (so the palette, the panel and tests share one code path).
 *
 * Rows are keyed by run id and updated in place: a row never gets replaced under the pointer.
 */

import { refreshIcon } from "@jupyterlab/ui-components";
import type { CommandRegistry } from "@lumino/commands";
import type { Message } from "@lumino/messaging";
import { Widget } from "@lumino/widgets";

import { CommandIDs } from "./commands-ids";
import { formatDuration, formatStart, gangText, liveDuration, stateText, stepText } from "./format";
import { runsIcon } from "./icons";
import type { RunsModel } from "./runs-model";
import { AdoptionSection } from "./stats-section";
import type { RunSummary } from "./wire";
import { isActive } from "./wire";

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

interface Action {
  id: string;
  label: string;
  testid: string;
}

const ACTIONS: readonly Action[] = [
  { id: CommandIDs.openMonitor, label: "Monitor", testid: "nbtrain-run-monitor" },
  { id: CommandIDs.cancelRun, label: "Cancel", testid: "nbtrain-run-cancel" },
  { id: CommandIDs.resumeRun, label: "Resume", testid: "nbtrain-run-resume" },
  { id: CommandIDs.copyAttachCode, label: "Copy code", testid: "nbtrain-run-copy" },
  { id: CommandIDs.openMlflow, label: "MLflow", testid: "nbtrain-run-mlflow" },
];

/** One run's row. */
class RunRow {
  readonly node = el("li", "nbtrain-Run");
  private readonly name = el("span", "nbtrain-Run-name");
  private readonly state = el("span", "nbtrain-Run-state");
  private readonly id = el("div", "nbtrain-Run-id");
  private readonly gang = el("div", "nbtrain-Run-meta");
  private readonly times = el("div", "nbtrain-Run-meta");
  private readonly duration = el("span", "nbtrain-Run-duration");
  private readonly start = el("span", "nbtrain-Run-start");
  private readonly step = el("span", "nbtrain-Run-step");
  private readonly failure = el("div", "nbtrain-Run-failure");
  private readonly detail = el("div", "nbtrain-Run-detail");
  private readonly buttons = new Map<string, HTMLButtonElement>();

  constructor(
    readonly runId: string,
    private readonly commands: CommandRegistry,
  ) {
    this.node.dataset.testid = `nbtrain-run-${runId}`;
    this.node.dataset.runId = runId;
    this.state.dataset.testid = "nbtrain-run-state";
    this.duration.dataset.testid = "nbtrain-run-duration";
    const title = el("div", "nbtrain-Run-title");
    title.append(el("span", "nbtrain-Run-dot"), this.name, this.state);
    this.times.append(this.start, this.duration, this.step);
    const actions = el("div", "nbtrain-Run-actions");
    for (const action of ACTIONS) {
      const button = el("button", "nbtrain-Run-action", action.label);
      button.type = "button";
      button.dataset.testid = action.testid;
      button.addEventListener("click", (event) => {
        event.stopPropagation();
        void this.commands.execute(action.id, { runId: this.runId });
      });
      this.buttons.set(action.id, button);
      actions.append(button);
    }
    this.detail.dataset.testid = "nbtrain-run-detail";
    this.node.append(title, this.id, this.gang, this.times, this.detail, this.failure, actions);
  }

  update(run: RunSummary, receivedAt: number, now: number): void {
    this.node.dataset.state = run.state;
    this.name.textContent = run.name;
    this.name.title = run.notebook !== null ? `from ${run.notebook}` : "";
    this.state.textContent = stateText(run.state) + (run.attempt > 0 ? ` (attempt ${run.attempt + 1})` : "");
    this.id.textContent = run.id;
    this.gang.textContent = gangText(run);
    this.start.textContent = run.started !== null ? `started ${formatStart(run.started)}` : "not started";
    this.tick(run, receivedAt, now);
    this.step.textContent = stepText(run);
    this.failure.textContent = run.failure ?? "";
    this.failure.hidden = run.failure === null;
    this.detail.textContent = run.detail ?? "";
    this.detail.hidden = run.detail === null;
    for (const [id, button] of this.buttons) {
      const args = { runId: run.id };
      button.disabled = !this.commands.isEnabled(id, args);
      button.hidden = !this.commands.isVisible(id, args);
      button.title = this.commands.caption(id, args);
    }
  }

  tick(run: RunSummary, receivedAt: number, now: number): void {
    this.duration.textContent = formatDuration(liveDuration(run, receivedAt, now));
  }
}

export class RunsPanel extends Widget {
  private readonly list = el("ul", "nbtrain-RunsPanel-list");
  private readonly summary = el("div", "nbtrain-RunsPanel-summary");
  private readonly status = el("div", "nbtrain-RunsPanel-status");
  private readonly empty = el("div", "nbtrain-RunsPanel-empty");
  private readonly rows = new Map<string, RunRow>();
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly model: RunsModel,
    private readonly commands: CommandRegistry,
    loadStats?: () => Promise<unknown>,
  ) {
    super();
    this.id = "nbtrain-runs";
    this.addClass("nbtrain-RunsPanel");
    this.node.dataset.testid = "nbtrain-runs-panel";
    this.title.icon = runsIcon;
    this.title.caption = "Distributed runs";
    const header = el("div", "nbtrain-RunsPanel-header");
    const heading = el("h2", "nbtrain-RunsPanel-heading", "Distributed runs");
    const refresh = el("button", "nbtrain-RunsPanel-refresh");
    refresh.type = "button";
    refresh.title = "Fetch the list of runs now";
    refresh.setAttribute("aria-label", "Refresh the list of runs");
    refreshIcon.element({ container: refresh, elementSize: "normal" });
    refresh.addEventListener("click", () => void this.model.refresh().catch(() => undefined));
    header.append(heading, refresh);
    this.empty.append(
      "No runs yet. Run a cell with ",
      el("code", "", "%%distributed"),
      " (or the notebook toolbar's “Run cell distributed…”) and it shows here.",
    );
    this.node.append(header, this.summary, this.status, this.list, this.empty);
    if (loadStats !== undefined) this.node.append(new AdoptionSection(loadStats).node);
    model.changed.connect(this.onModelChanged);
    this.render();
  }

  override dispose(): void {
    clearInterval(this.timer);
    this.model.changed.disconnect(this.onModelChanged);
    super.dispose();
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.render();
    this.timer ??= setInterval(() => this.tick(), 1000);
  }

  protected override onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private readonly onModelChanged = (): void => {
    if (this.isVisible) this.render();
  };

  private render(): void {
    const runs = this.model.runs;
    const now = Date.now() / 1000;
    const seen = new Set<string>();
    let previous: HTMLElement | null = null;
    for (const run of runs) {
      seen.add(run.id);
      let row = this.rows.get(run.id);
      if (row === undefined) {
        row = new RunRow(run.id, this.commands);
        this.rows.set(run.id, row);
      }
      row.update(run, this.model.receivedAt(run.id), now);
      // keep DOM order = model order without detaching rows that are already in place
      const expected: ChildNode | null = previous === null ? this.list.firstChild : previous.nextSibling;
      if (expected !== row.node) this.list.insertBefore(row.node, expected);
      previous = row.node;
    }
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.node.remove();
        this.rows.delete(id);
      }
    }
    const active = this.model.activeCount;
    this.summary.textContent = `${active} active · ${runs.length} ${runs.length === 1 ? "run" : "runs"}`;
    this.empty.hidden = runs.length > 0 || !this.model.loaded;
    this.node.dataset.connection = this.model.connection;
    const error = this.model.error;
    this.status.hidden = error === null && this.model.loaded;
    this.status.textContent = error !== null
      ? `Cannot reach the nbtrain server extension: ${error}`
      : this.model.loaded ? "" : "Loading runs…";
  }

  private tick(): void {
    const now = Date.now() / 1000;
    for (const run of this.model.runs) {
      if (isActive(run.state)) this.rows.get(run.id)?.tick(run, this.model.receivedAt(run.id), now);
    }
  }
}
