/** Environment check: per-rank versions against the notebook kernel's, mismatches flagged. */

import { h, setText, show } from "./dom";
import type { Env } from "./protocol";

const COLUMNS = ["python", "torch", "accelerate", "device", "gpu_name"] as const;
const HEADINGS: Record<(typeof COLUMNS)[number], string> = {
  python: "Python",
  torch: "torch",
  accelerate: "accelerate",
  device: "device",
  gpu_name: "GPU",
};

export class EnvView {
  readonly el: HTMLDetailsElement;
  private readonly summary = h("summary", { class: "nbtrain-section-title" });
  private readonly table = h("table", { class: "nbtrain-env-table" });
  private rendered: Env | null = null;
  private opened = false;

  constructor() {
    this.el = h("details", { class: "nbtrain-section nbtrain-env", "data-testid": "nbtrain-env" }, this.summary, h("div", { class: "nbtrain-env-scroll" }, this.table));
  }

  render(env: Env | null): void {
    show(this.el, env !== null && env.ranks.length > 0);
    if (env === null || env === this.rendered) return;
    this.rendered = env;
    const n = env.ranks.length;
    setText(
      this.summary,
      env.mismatches > 0
        ? `Environment: ${env.mismatches} mismatch${env.mismatches === 1 ? "" : "es"} with the kernel`
        : `Environment: ${n} rank${n === 1 ? "" : "s"} match the kernel`,
    );
    this.el.dataset["mismatches"] = String(env.mismatches);
    if (env.mismatches > 0 && !this.opened) {
      this.el.open = true; // open once when something differs; the user may close it again
      this.opened = true;
    }
    const head = h("tr", {}, h("th", {}, "rank"), h("th", {}, "host"), ...COLUMNS.map((c) => h("th", {}, HEADINGS[c])));
    const kernel = h(
      "tr",
      { class: "nbtrain-env-kernel" },
      h("td", {}, "kernel"),
      h("td", {}, ""),
      ...COLUMNS.map((c) => h("td", {}, env.kernel[c] ?? "")),
    );
    const rows = env.ranks.map((rank) => {
      const mismatch = new Set(rank.mismatch ?? []);
      return h(
        "tr",
        { "data-rank": rank.rank },
        h("td", {}, String(rank.rank)),
        h("td", {}, rank.host ?? ""),
        ...COLUMNS.map((c) => {
          const value = rank[c] ?? "";
          const flagged = mismatch.has(c);
          return h(
            "td",
            flagged
              ? { class: "nbtrain-mismatch", "data-mismatch": "1", title: `differs from the kernel's ${env.kernel[c] ?? "(none)"}` }
              : {},
            flagged ? `≠ ${value}` : value,
          );
        }),
      );
    });
    this.table.replaceChildren(h("thead", {}, head), h("tbody", {}, kernel, ...rows));
  }
}
