/** Failure triage: pinned above everything once the run failed (first failing rank, exit, traceback, last lines). */

import { h, setText, show } from "./dom";
import { exitText } from "./format";
import type { Failure } from "./protocol";

export class FailureView {
  readonly el: HTMLElement;
  private readonly summary = h("div", { class: "nbtrain-failure-summary" });
  private readonly exit = h("div", { class: "nbtrain-failure-exit" });
  private readonly traceback = h("pre", { class: "nbtrain-pre", "data-testid": "nbtrain-traceback" });
  private readonly tracebackBox = h("div", {}, h("div", { class: "nbtrain-subtitle" }, "Traceback"), this.traceback);
  private readonly lastTitle = h("div", { class: "nbtrain-subtitle" });
  private readonly lastLines = h("pre", { class: "nbtrain-pre nbtrain-last-lines" });
  private readonly lastBox = h("div", {}, this.lastTitle, this.lastLines);
  private readonly openLogs = h("button", { type: "button", class: "nbtrain-button" });
  private rendered: Failure | null = null;
  /** This view showed the run without a failure: a failure that comes now is news, and is scrolled to. */
  private sawNoFailure = false;

  constructor(showRankLogs: (rank: number) => void) {
    this.el = h(
      "section",
      { class: "nbtrain-failure", role: "alert", "data-testid": "nbtrain-failure", hidden: true },
      h("div", { class: "nbtrain-failure-head" }, this.summary, this.openLogs),
      this.exit,
      this.tracebackBox,
      this.lastBox,
    );
    this.openLogs.addEventListener("click", () => {
      if (this.rendered?.rank !== null && this.rendered?.rank !== undefined) showRankLogs(this.rendered.rank);
    });
  }

  render(failure: Failure | null): void {
    show(this.el, failure !== null);
    if (failure === null) this.sawNoFailure = true;
    if (failure === null || failure === this.rendered) return;
    const news = this.rendered === null && this.sawNoFailure;
    this.rendered = failure;
    setText(this.summary, failure.summary || "The run failed.");
    const exit = exitText(failure.exit_code, failure.signal);
    const where = failure.rank !== null ? `rank ${failure.rank}${failure.node !== null ? ` on node ${failure.node}` : ""}` : "";
    const words = [where, exit, failure.reason].filter((part) => part && !(failure.summary || "").includes(part));
    setText(this.exit, words.join(" · "));
    show(this.exit, words.length > 0);
    setText(this.traceback, failure.traceback ?? "");
    show(this.tracebackBox, Boolean(failure.traceback));
    const lines = failure.last_lines;
    setText(this.lastTitle, failure.rank !== null ? `Last lines of rank ${failure.rank}` : "Last lines");
    setText(this.lastLines, lines.join("\n"));
    show(this.lastBox, lines.length > 0);
    this.lastLines.scrollTop = this.lastLines.scrollHeight; // the lines just before the end matter most
    show(this.openLogs, failure.rank !== null);
    setText(this.openLogs, failure.rank !== null ? `Rank ${failure.rank} logs` : "");
    // the panel sits at the top of a tall widget while the user looks at the logs or charts below:
    // bring it into view once, when the run fails under their eyes (not on a reload of a failed run)
    if (news && this.el.isConnected) this.el.scrollIntoView({ block: "nearest" });
  }
}
