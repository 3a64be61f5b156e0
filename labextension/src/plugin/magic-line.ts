/**
 * The `%%distributed` line of a cell: read its flags, write the dialog's choices into it (pure).
 *
 * Only the four flags the "Run cell distributed…" dialog edits (`--nodes`, `--gpus`, `--backend`,
 * `--strategy`) are rewritten; every other flag of an existing line (`--name`, `--out`, `--env`, …)
 * is kept as the user wrote it. Choices, ranges, defaults and help come from the one table of options
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
}

export const DEFAULT_OPTIONS: DistributedOptions = {
  nodes: OPTIONS["--nodes"].default,
  gpus: OPTIONS["--gpus"].default,
  backend: OPTIONS["--backend"].default,
  strategy: OPTIONS["--strategy"].default,
};

const MAGIC = "%%distributed";
const EDITED = new Set(["--nodes", "--gpus", "--backend", "--strategy"]);

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
  const options = { ...DEFAULT_OPTIONS };
  const { line, isMagic } = firstLine(source);
  if (!isMagic) return options;
  const tokens = splitArgs(line.trim()).slice(1);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i] ?? "";
    const eq = token.indexOf("=");
    const flag = eq > 0 ? token.slice(0, eq) : token;
    if (!EDITED.has(flag)) continue;
    const raw = unquote(eq > 0 ? token.slice(eq + 1) : (tokens[++i] ?? ""));
    const count = raw.trim() === "" ? Number.NaN : Number(raw); // not a number: keep the default
    if (flag === "--nodes" && Number.isFinite(count)) options.nodes = clampInt(count, LIMITS.nodes.min, LIMITS.nodes.max);
    else if (flag === "--gpus" && Number.isFinite(count)) options.gpus = clampInt(count, LIMITS.gpus.min, LIMITS.gpus.max);
    else if (flag === "--backend" && (BACKENDS as readonly string[]).includes(raw)) options.backend = raw as Backend;
    else if (flag === "--strategy" && (STRATEGIES as readonly string[]).includes(raw)) options.strategy = raw as Strategy;
  }
  return options;
}

/** `%%distributed --nodes 2 --gpus 8 --backend local --strategy ddp` followed by `extra` flags. */
export function magicLine(options: DistributedOptions, extra: readonly string[] = []): string {
  const nodes = clampInt(options.nodes, LIMITS.nodes.min, LIMITS.nodes.max);
  const gpus = clampInt(options.gpus, LIMITS.gpus.min, LIMITS.gpus.max);
  return [MAGIC, "--nodes", String(nodes), "--gpus", String(gpus), "--backend", options.backend,
    "--strategy", options.strategy, ...extra].join(" ");
}

/**
 * The cell's source with its `%%distributed` line set to `options`: an existing line is rewritten
 * (its other flags kept, in order), otherwise the line is put on top of the cell.
 */
export function withMagicLine(source: string, options: DistributedOptions): string {
  const { line, rest, isMagic } = firstLine(source);
  if (!isMagic) return source === "" ? magicLine(options) : `${magicLine(options)}\n${source}`;
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
  const head = magicLine(options, kept);
  return rest === "" && !source.includes("\n") ? head : `${head}\n${rest}`;
}

/** True when some cell of the notebook loads the extension (`%load_ext nbtrain`). */
export function loadsExtension(sources: readonly string[]): boolean {
  return sources.some((source) => /^[ \t]*%load_ext[ \t]+(?:[^\n]*[ \t])?nbtrain[ \t]*(?:$|[ \t])/m.test(source));
}
