/** Dialog bodies: "Run cell distributed…" (the four flags; help from nbtrain/flags.py) and "Attach to run" (pick a run). */

import type { Dialog } from "@jupyterlab/apputils";
import { Widget } from "@lumino/widgets";

import { stateText } from "./format";
import type { Backend, DistributedOptions, Strategy } from "./magic-line";
import { BACKENDS, HELP, LIMITS, magicLine, STRATEGIES } from "./magic-line";
import type { RunSummary } from "./wire";

function field(parent: HTMLElement, label: string, control: HTMLElement, hint?: string): void {
  const row = document.createElement("label");
  row.className = "nbtrain-Form-row";
  const text = document.createElement("span");
  text.className = "nbtrain-Form-label";
  text.textContent = label;
  row.append(text, control);
  if (hint !== undefined) {
    const small = document.createElement("small");
    small.className = "nbtrain-Form-hint";
    small.textContent = hint;
    row.append(small);
  }
  parent.append(row);
}

function numberInput(name: string, value: number, min: number, max: number): HTMLInputElement {
  const input = document.createElement("input");
  input.type = "number";
  input.className = "jp-mod-styled";
  input.name = name;
  input.min = String(min);
  input.max = String(max);
  input.step = "1";
  input.value = String(value);
  input.dataset.testid = `nbtrain-dialog-${name}`;
  return input;
}

function select(name: string, values: readonly string[], value: string): HTMLSelectElement {
  const element = document.createElement("select");
  element.className = "jp-mod-styled";
  element.name = name;
  element.dataset.testid = `nbtrain-dialog-${name}`;
  for (const option of values) element.append(new Option(option, option, option === value, option === value));
  return element;
}

function readInt(input: HTMLInputElement, min: number, max: number): number {
  const value = Math.round(Number(input.value));
  return Number.isFinite(value) ? Math.min(max, Math.max(min, value)) : min;
}

/** The form of "Run cell distributed…": nodes, GPUs per node, backend, strategy, and the line it writes. */
export class DistributedForm extends Widget implements Dialog.IBodyWidget<DistributedOptions> {
  private readonly nodes: HTMLInputElement;
  private readonly gpus: HTMLInputElement;
  private readonly backend: HTMLSelectElement;
  private readonly strategy: HTMLSelectElement;
  private readonly preview: HTMLElement;

  /** `addsLoadExt`: the notebook has no `%load_ext nbtrain`, so a cell with it will be added above. */
  constructor(initial: DistributedOptions, addsLoadExt: boolean) {
    super();
    this.addClass("nbtrain-Form");
    this.nodes = numberInput("nodes", initial.nodes, LIMITS.nodes.min, LIMITS.nodes.max);
    this.gpus = numberInput("gpus", initial.gpus, LIMITS.gpus.min, LIMITS.gpus.max);
    this.backend = select("backend", BACKENDS, initial.backend);
    this.strategy = select("strategy", STRATEGIES, initial.strategy);
    field(this.node, "Nodes", this.nodes, HELP.nodes);
    field(this.node, "GPUs per node", this.gpus, HELP.gpus);
    field(this.node, "Backend", this.backend, HELP.backend);
    field(this.node, "Strategy", this.strategy, HELP.strategy);
    this.preview = document.createElement("code");
    this.preview.className = "nbtrain-Form-preview";
    this.preview.dataset.testid = "nbtrain-dialog-preview";
    const note = document.createElement("p");
    note.className = "nbtrain-Form-note";
    note.textContent = "This line goes on top of the active cell" +
      (addsLoadExt ? "; a cell with %load_ext nbtrain is added above it (the notebook has none)." : ".");
    this.node.append(this.preview, note);
    for (const control of [this.nodes, this.gpus, this.backend, this.strategy]) {
      control.addEventListener("input", () => this.update());
      control.addEventListener("change", () => this.update());
    }
    this.update();
  }

  getValue(): DistributedOptions {
    return {
      nodes: readInt(this.nodes, LIMITS.nodes.min, LIMITS.nodes.max),
      gpus: readInt(this.gpus, LIMITS.gpus.min, LIMITS.gpus.max),
      backend: this.backend.value as Backend,
      strategy: this.strategy.value as Strategy,
    };
  }

  protected override onUpdateRequest(): void {
    this.preview.textContent = magicLine(this.getValue());
  }

  protected override onAfterAttach(): void {
    this.nodes.focus();
    this.nodes.select();
  }
}

/** The run picker of "Attach to run": newest first, active runs marked. */
export class RunPicker extends Widget implements Dialog.IBodyWidget {
  private readonly select: HTMLSelectElement;

  constructor(runs: readonly RunSummary[], selected?: string) {
    super();
    this.addClass("nbtrain-Form");
    this.select = document.createElement("select");
    this.select.className = "jp-mod-styled";
    this.select.dataset.testid = "nbtrain-dialog-run";
    for (const run of runs) {
      const label = `${run.id} · ${stateText(run.state)}${run.notebook !== null ? ` · ${run.notebook}` : ""}`;
      this.select.append(new Option(label, run.id, run.id === selected, run.id === selected));
    }
    field(this.node, "Run", this.select);
    const note = document.createElement("p");
    note.className = "nbtrain-Form-note";
    note.textContent = "In a notebook, a cell that attaches to the run and shows its monitor is added below the active cell.";
    this.node.append(note);
  }

  getValue(): string {
    return this.select.value;
  }
}
