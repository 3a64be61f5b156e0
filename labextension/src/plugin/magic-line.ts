/**
 * The `%%distributed` line of a cell: read its flags, write the dialog's choices into it (pure).
 *
 * Only the flags the "Run cell distributed…" dialog edits (`--profile`, `--nodes`, `--gpus`, `--backend`,
 * `--strategy`) are rewritten; every other flag of an existing line (`--name`, `--out`, `--env`, …)
 * is kept as the user wrote it. With a profile, a field the profile fixes is written only when the user
 * changed it (and never when the profile locks it), so the line says what the user chose over the profile. Choices, ranges, defaults and help come from the one table of options
 * (nbtrain/flags.py), generated into ./options.generated.ts.
 */

import { JOB_OPTIONS } from "./options.generated";

const { options: OPTIONS } = JOB_OPTIONS;

export const BACKENDS = OPTIONS["--backend"].choices;
export const STRATEGIES = OPTIONS["--strategy"].choices;
export type Backend = (typeof BACKENDS)[number];
export type Strategy = (typeof STRATEGIES)[number];

export const LIMITS = {
  nodes: { min: OPTIONS["--nodes"].min, max: OPTIONS["--nodes"].max },
  gpus: { min: OPTIONS["--gpus"].min, max: OPTIONS["--gpus"].max },
} as const;

/** The help text of each flag the dialog edits (the magic's own `--help`). */
export const HELP = {
  nodes: OPTIONS["--nodes"].help,
  gpus: OPTIONS["--gpus"].help,
  backend: OPTIONS["--backend"].help,
  strategy: OPTIONS["--strategy"].help,
} as const;

export interface DistributedOptions {
  nodes: number;
  gpus: number;
  backend: Backend;
  strategy: Strategy;
  /** `--profile NAME`: the profile the line starts from (absent: none). */
  profile?: string;
}

/** The dialog's four fields, and their flags. */
export type FieldName = "nodes" | "gpus" | "backend" | "strategy";
export const FIELDS: readonly FieldName[] = ["nodes", "gpus", "backend", "strategy"];
export const FIELD_FLAGS: Readonly<Record<FieldName, string>> = {
  nodes: "--nodes", gpus: "--gpus", backend: "--backend", strategy: "--strategy",
};

/** What a profile fixes among the dialog's fields: its values, and which of them it locks. */
export interface Preset {
  values: Partial<Pick<DistributedOptions, FieldName>>;
  locked: ReadonlySet<FieldName>;
}

/** A profile name as nbtrain accepts one (letters, digits, '-', '_', '.'). */
export const PROFILE_NAME = /^[A-Za-z0-9._-]+$/;

export const DEFAULT_OPTIONS: DistributedOptions = {
  nodes: OPTIONS["--nodes"].default,
  gpus: OPTIONS["--gpus"].default,
  backend: OPTIONS["--backend"].default,
  strategy: OPTIONS["--strategy"].default,
};

const MAGIC = "%%distributed";
const EDITED = new Set(["--profile", "--nodes", "--gpus", "--backend", "--strategy"]);

/** Split a magic line into tokens, keeping quoted tokens whole (quotes included), like IPython's arg_split. */
export function splitArgs(line: string): string[] {
  const tokens: string[] = [];
  const re = /(?:[^\s"']+|"(?:[^"\\]|\\.)*"?|'[^']*'?)+/g;
  for (const match of line.matchAll(re)) tokens.push(match[0]);
  return tokens;
}

function unquote(token: string): string {
  const first = token[0];
  if ((first === '"' || first === "'") && token.endsWith(first) && token.length >= 2) return token.slice(1, -1);
  return token;
}

/** The first line, and whether it is a `%%distributed` magic line. */
function firstLine(source: string): { line: string; rest: string; isMagic: boolean } {
  const end = source.indexOf("\n");
  const line = end < 0 ? source : source.slice(0, end);
  const rest = end < 0 ? "" : source.slice(end + 1);
  const trimmed = line.trim();
  return { line, rest, isMagic: trimmed === MAGIC || trimmed.startsWith(`${MAGIC} `) || trimmed.startsWith(`${MAGIC}\t`) };
}

function clampInt(value: number, min: number, max: number): number {
  if (!Number.isFinite(value)) return min;
  return Math.min(max, Math.max(min, Math.round(value)));
}

/** The dialog's starting values: the cell's own flags when it has a `%%distributed` line, else the defaults. */
export function readOptions(source: string): DistributedOptions {
  return readLine(source).options;
}

/** {@link readOptions}, and which of the four fields the line itself sets (the others are defaults). */
export function readLine(source: string): { options: DistributedOptions; given: ReadonlySet<FieldName> } {
  const options: DistributedOptions = { ...DEFAULT_OPTIONS };
  const given = new Set<FieldName>();
  const { line, isMagic } = firstLine(source);
  if (!isMagic) return { options, given };
  const tokens = splitArgs(line.trim()).slice(1);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] ?? "";
    const eq = token.indexOf("=");
    const flag = eq > 0 ? token.slice(0, eq) : token;
    if (!EDITED.has(flag)) continue;
    const raw = unquote(eq > 0 ? token.slice(eq + 1) : (tokens[++i] ?? ""));
    const count = raw.trim() === "" ? Number.NaN : Number(raw); // not a number: keep the default
    if (flag === "--nodes" && Number.isFinite(count)) {
      options.nodes = clampInt(count, LIMITS.nodes.min, LIMITS.nodes.max);
      given.add("nodes");
    } else if (flag === "--gpus" && Number.isFinite(count)) {
      options.gpus = clampInt(count, LIMITS.gpus.min, LIMITS.gpus.max);
      given.add("gpus");
    } else if (flag === "--backend" && (BACKENDS as readonly string[]).includes(raw)) {
      options.backend = raw as Backend;
      given.add("backend");
    } else if (flag === "--strategy" && (STRATEGIES as readonly string[]).includes(raw)) {
      options.strategy = raw as Strategy;
      given.add("strategy");
    } else if (flag === "--profile" && PROFILE_NAME.test(raw)) {
      options.profile = raw;
    }
  }
  return { options, given };
}

/**
 * `%%distributed --nodes 2 --gpus 8 --backend local --strategy ddp` followed by `extra` flags.
 *
 * With `options.profile`: `%%distributed --profile NAME` and then only the fields `preset` (what that profile
 * fixes) leaves to the user, or that the user set to another value than the profile's; a locked field is never
 * written (the profile's value holds). Without `preset` (the profile is not known here) every field is written,
 * and the magic itself refuses one that changes a lock.
 */
export function magicLine(options: DistributedOptions, extra: readonly string[] = [], preset?: Preset): string {
  const values: Pick<DistributedOptions, FieldName> = {
    nodes: clampInt(options.nodes, LIMITS.nodes.min, LIMITS.nodes.max),
    gpus: clampInt(options.gpus, LIMITS.gpus.min, LIMITS.gpus.max),
    backend: options.backend,
    strategy: options.strategy,
  };
  const profile = options.profile !== undefined && PROFILE_NAME.test(options.profile) ? options.profile : undefined;
  const tokens = profile !== undefined ? [MAGIC, "--profile", profile] : [MAGIC];
  for (const field of FIELDS) {
    const fixed = profile !== undefined ? preset : undefined;
    if (fixed !== undefined && (fixed.locked.has(field) || fixed.values[field] === values[field])) continue;
    tokens.push(FIELD_FLAGS[field], String(values[field]));
  }
  return [...tokens, ...extra].join(" ");
}

/**
 * The cell's source with its `%%distributed` line set to `options`: an existing line is rewritten
 * (its other flags kept, in order), otherwise the line is put on top of the cell.
 */
export function withMagicLine(source: string, options: DistributedOptions, preset?: Preset): string {
  const { line, rest, isMagic } = firstLine(source);
  const fresh = magicLine(options, [], preset);
  if (!isMagic) return source === "" ? fresh : `${fresh}\n${source}`;
  const tokens = splitArgs(line.trim()).slice(1);
  const kept: string[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] ?? "";
    const eq = token.indexOf("=");
    const flag = eq > 0 ? token.slice(0, eq) : token;
    if (EDITED.has(flag)) {
      if (eq < 0) i++; // skip the flag's value too
      continue;
    }
    kept.push(token);
  }
  const head = magicLine(options, kept, preset);
  return rest === "" && !source.includes("\n") ? head : `${head}\n${rest}`;
}

/** True when the cell's source starts with a `%%distributed` line (a job cell `nbtrain export` can pick). */
export function isDistributedCell(source: string): boolean {
  return firstLine(source).isMagic;
}

/** True when some cell of the notebook loads the extension (`%load_ext nbtrain`). */
export function loadsExtension(sources: readonly string[]): boolean {
  return sources.some((source) => /^[ \t]*%load_ext[ \t]+(?:[^\n]*[ \t])?nbtrain[ \t]*(?:$|[ \t])/m.test(source));
}
