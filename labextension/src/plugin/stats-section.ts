/**
 * The "Adoption" section at the foot of the runs panel: a collapsed `<details>` that fetches
 * `GET /nbtrain/stats` each time it is opened (the figures scan the store: not on every run update).
 */

import { statsLines, windowText } from "./stats";

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class AdoptionSection {
  readonly node = el("details", "nbtrain-Adoption");
  private readonly heading = el("summary", "nbtrain-Adoption-heading", "Adoption");
  private readonly body = el("dl", "nbtrain-Adoption-list");
  private readonly status = el("div", "nbtrain-Adoption-status");
  private loading = 0;

  constructor(private readonly load: () => Promise<unknown>) {
    this.node.dataset.testid = "nbtrain-adoption";
    this.node.append(this.heading, this.status, this.body);
    this.node.addEventListener("toggle", () => {
      if (this.node.open) void this.refresh();
    });
  }

  /** Fetch and show the figures (a newer call wins over one still in flight). */
  async refresh(): Promise<void> {
    const ticket = ++this.loading;
    this.status.textContent = "Loading…";
    this.status.hidden = false;
    let body: unknown;
    try {
      body = await this.load();
    } catch (error) {
      if (ticket === this.loading) this.status.textContent = `Cannot read the figures: ${String(error)}`;
      return;
    }
    if (ticket !== this.loading) return;
    const lines = statsLines(body);
    if (lines === null) {
      this.status.textContent = "The server answered without figures (is the nbtrain server extension current?).";
      return;
    }
    this.status.hidden = true;
    this.heading.textContent = `Adoption (${windowText(body)})`;
    this.body.replaceChildren(
      ...lines.flatMap((line) => {
        const value = el("dd", "nbtrain-Adoption-value", line.value);
        value.dataset.testid = line.testid;
        return [el("dt", "nbtrain-Adoption-label", line.label), value];
      }),
    );
  }
}
