/**
 * Dialog bodies: "Run cell distributed…" (a profile and the four flags; help from nbtrain/flags.py) and
 * "Attach to run" (pick a run). What a chosen profile does to the fields is ./profiles.ts (pure).
 */

import type { Dialog } from "@jupyterlab/apputils";
import { Widget } from "@lumino/widgets";

import { stateText } from "./format";
import type { Backend, DistributedOptions, FieldName, Preset, Strategy } from "./magic-line";
import { BACKENDS, HELP, LIMITS, magicLine, STRATEGIES } from "./magic-line";
import type { FormState, ProfileCatalog, ProfileInfo } from "./profiles";
import { chooseProfile } from "./profiles";
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

/** The dialog's answer: the options, and what the chosen profile fixes (to write the line with). */
export interface DistributedChoice {
  options: DistributedOptions;
  preset?: Preset;
}

const NO_PROFILE = "";

/** The form of "Run cell distributed…": a profile, nodes, GPUs per node, backend, strategy, and the line it writes. */
export class DistributedForm extends Widget implements Dialog.IBodyWidget<DistributedChoice> {
  private readonly profile: HTMLSelectElement;
  private readonly profileHint: HTMLElement;
  private readonly locks: HTMLElement;
  private readonly nodes: HTMLInputElement;
  private readonly gpus: HTMLInputElement;
  private readonly backend: HTMLSelectElement;
  private readonly strategy: HTMLSelectElement;
  private readonly preview: HTMLElement;
  private readonly profiles: ReadonlyMap<string, ProfileInfo>;
  private readonly problem: string | null;
  private readonly unreadable: readonly string[];
  private state: FormState;

  /**
   * `initial`: the cell's line (`given`: the fields it sets itself, kept over a profile's unlocked values);
   * `addsLoadExt`: the notebook has no `%load_ext nbtrain`, so a cell with it will be added above;
   * `catalog`: the profiles of `GET /nbtrain/profiles`, or the reason they could not be fetched.
   */
  constructor(initial: { options: DistributedOptions; given: ReadonlySet<FieldName> }, addsLoadExt: boolean,
    catalog: ProfileCatalog | string) {
    super();
    this.addClass("nbtrain-Form");
    const profiles = typeof catalog === "string" ? [] : catalog.profiles;
    this.profiles = new Map(profiles.map((p) => [p.name, p]));
    this.profile = document.createElement("select");
    this.profile.className = "jp-mod-styled";
    this.profile.name = "profile";
    this.profile.dataset.testid = "nbtrain-dialog-profile";
    this.profile.append(new Option("none", NO_PROFILE));
    for (const p of profiles) this.profile.append(new Option(`${p.name} ${p.version}`.trim(), p.name));
    const named = initial.options.profile;
    if (named !== undefined && !this.profiles.has(named)) {
      this.profile.append(new Option(`${named} (not found on the server)`, named));  // the magic will say why
    }
    this.profile.value = named ?? NO_PROFILE;
    this.state = chooseProfile(initial.options, this.profiles.get(named ?? "") ?? null, initial.given);
    if (named !== undefined && !this.profiles.has(named)) this.state = { ...this.state, options: initial.options };
    this.profileHint = document.createElement("small");
    this.profileHint.className = "nbtrain-Form-hint";
    this.profileHint.dataset.testid = "nbtrain-dialog-profile-hint";
    this.locks = document.createElement("p");
    this.locks.className = "nbtrain-Form-note";
    this.locks.dataset.testid = "nbtrain-dialog-locked";
    const options = this.state.options;
    this.nodes = numberInput("nodes", options.nodes, LIMITS.nodes.min, LIMITS.nodes.max);
    this.gpus = numberInput("gpus", options.gpus, LIMITS.gpus.min, LIMITS.gpus.max);
    this.backend = select("backend", BACKENDS, options.backend);
    this.strategy = select("strategy", STRATEGIES, options.strategy);
    const row = document.createElement("label");
    row.className = "nbtrain-Form-row";
    const label = document.createElement("span");
    label.className = "nbtrain-Form-label";
    label.textContent = "Profile";
    row.append(label, this.profile, this.profileHint);
    this.node.append(row, this.locks);
    this.problem = typeof catalog === "string" ? catalog : null;
    this.unreadable = typeof catalog === "string" ? [] : catalog.unreadable;
    this.locks.title = this.unreadable.join("\n");
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
    this.profile.addEventListener("change", () => this.choose());
    this.refresh();
  }

  /** The user picked another profile: fill the fields it fixes (the user's own values give way) and lock. */
  private choose(): void {
    const chosen = this.profiles.get(this.profile.value) ?? null;
    this.state = chooseProfile(this.fields(), chosen);
    if (chosen === null && this.profile.value !== NO_PROFILE) {
      this.state = { ...this.state, options: { ...this.state.options, profile: this.profile.value } };
    }
    const options = this.state.options;
    this.nodes.value = String(options.nodes);
    this.gpus.value = String(options.gpus);
    this.backend.value = options.backend;
    this.strategy.value = options.strategy;
    this.refresh();
  }

  private refresh(): void {
    const controls = { nodes: this.nodes, gpus: this.gpus, backend: this.backend, strategy: this.strategy };
    for (const [name, control] of Object.entries(controls)) {
      const locked = this.state.disabled.has(name as FieldName);
      control.disabled = locked;
      control.title = locked ? `locked by profile ${this.profile.value}` : "";
    }
    const chosen = this.profile.value;
    if (chosen !== NO_PROFILE && !this.profiles.has(chosen)) {
      this.profileHint.textContent = `The server does not list profile ${chosen}; the kernel looks it up when the cell runs.`;
    } else if (chosen === NO_PROFILE && this.problem !== null) {
      this.profileHint.textContent = `Profiles are not available: ${this.problem}`;
    } else if (chosen === NO_PROFILE && this.profiles.size === 0) {
      this.profileHint.textContent = "No profiles are installed (nbtrain templates list).";
    } else {
      this.profileHint.textContent = this.state.hint;
    }
    const broken = this.unreadable.length > 0
      ? ` ${this.unreadable.length} profile source(s) could not be read (hover for why).` : "";
    this.locks.textContent = (this.state.locked.length > 0
      ? `Locked by the profile: ${this.state.locked.join(", ")}.` : "") + broken;
    this.locks.hidden = this.locks.textContent === "";
    this.update();
  }

  private fields(): DistributedOptions {
    const options: DistributedOptions = {
      nodes: readInt(this.nodes, LIMITS.nodes.min, LIMITS.nodes.max),
      gpus: readInt(this.gpus, LIMITS.gpus.min, LIMITS.gpus.max),
      backend: this.backend.value as Backend,
      strategy: this.strategy.value as Strategy,
    };
    if (this.profile.value !== NO_PROFILE) options.profile = this.profile.value;
    return options;
  }

  getValue(): DistributedChoice {
    const options = this.fields();
    const preset = this.state.preset;
    return preset !== undefined && options.profile !== undefined ? { options, preset } : { options };
  }

  protected override onUpdateRequest(): void {
    const { options, preset } = this.getValue();
    this.preview.textContent = magicLine(options, [], preset);
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
